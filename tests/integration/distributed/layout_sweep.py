#!/usr/bin/env python3
"""A sweep of the layouts users train on beyond those the suite pins: image buckets (1 latent frame)
per task, batch sizes that do not divide, fsdp on a rank count that divides no tensor's rows,
accumulation around fsdp x sequence parallelism, and epochs that do not fill their last step — each
run against one device with the tolerances equivalence.py derives. Not a test (about 2 minutes);
run it when a strategy or the data path changes:

    cd tests/integration && WANFW_BUILD_DIR=../../build ../../.venv/bin/python distributed/layout_sweep.py [CASE...]
"""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/integration: the harness

from harness.equivalence import compare, tiny_wan_rounding  # noqa: E402
from harness.layouts import CPU, DDP, FSDP, LR, run_on, tiny_wan  # noqa: E402

DP2 = {"name": "data_parallel", "devices": ["cpu", "cpu"]}
SP2 = {**DDP, "sequence_parallel": 2}


def accumulated(steps, inner):
    return {"name": "grad_accum", "steps": steps, "inner": inner}


def bucket(shape, samples=24, **data):
    return {"buckets": [shape], "num_samples": samples, **data}


# name: (task, data, one device's batch, (strategy, batch, ranks), tokens a sample, sections)
CASES = {
    "t2v image bucket, ddp 2x2": ("t2v", bucket("1x8x8"), 4, (DDP, 2, 2), 16, {}),
    "t2v image bucket, ddp sp2": ("t2v", bucket("1x8x8"), 2, (SP2, 2, 2), 16, {}),
    "ti2v image bucket, ddp sp2": ("ti2v", bucket("1x8x8"), 2, (SP2, 2, 2), 16, {}),
    "i2v image bucket, ddp 2x2": ("i2v", bucket("1x8x8"), 4, (DDP, 2, 2), 16, {}),
    "i2v image bucket, ddp sp2": ("i2v", bucket("1x8x8"), 2, (SP2, 2, 2), 16, {}),
    "data_parallel 2 replicas, batch 3": ("t2v", bucket("3x4x4"), 3, (DP2, 3, 1), 12, {}),
    "ddp 2x3": ("t2v", bucket("3x4x4"), 6, (DDP, 3, 2), 12, {}),
    "fsdp on 3 ranks": ("t2v", bucket("3x4x4"), 3, (FSDP, 1, 3), 12, {}),
    "grad_accum 3x1": ("ti2v", bucket("3x4x4"), 3, (accumulated(3, CPU), 1, 1), 12, {}),
    "fsdp 2 x sp2 in grad_accum 2": ("ti2v", bucket("3x8x8"), 4,
                                     (accumulated(2, {**FSDP, "sequence_parallel": 2}), 1, 4), 48, {}),
    "i2v ddp sp2, 80 tokens": ("i2v", bucket("5x8x8"), 2, (SP2, 2, 2), 80, {}),
    "fsdp on 3 ranks, 7 samples, 2 epochs padded": ("t2v", bucket("3x4x4", 7, drop_last=False), 3, (FSDP, 1, 3), 12,
                                                     {"trainer": {"max_steps": 0, "epochs": 2}}),
}


def main(chosen):
    failed = 0
    for name, (task, data, batch, (strategy, split_batch, ranks), tokens, sections) in CASES.items():
        if chosen and name not in chosen:
            continue
        with tempfile.TemporaryDirectory() as t:
            tmp = Path(t)
            one = run_on(tmp, "one", CPU, batch, tiny_wan(task), data=data, **sections)
            other = run_on(tmp, "other", strategy, split_batch, tiny_wan(task), ranks, data=data, **sections)
        c = compare(other, one, lr=LR, tolerance=tiny_wan_rounding(batch, tokens))
        ok = c.gradients <= 1 and c.weights <= 1
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {name} vs one device x {batch}: {c}", flush=True)
    print(f"{len(chosen or CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
