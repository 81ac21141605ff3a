#!/usr/bin/env python3
"""Benchmark: a training step of a DiT trained whole with the optimizer's state on the device against
the same step with it in host memory (optimizer.state host).

    .venv/bin/python bench/host_state_step.py                    # the CPU: what the host state adds
    python3 bench/host_state_step.py --size 1.3b --device cuda    # Wan2.1 1.3B on a GPU

Each variant trains the same DiT for --steps steps, one after the other on this machine, gradient
checkpointing on: fp32 weights with the state on the device and on the host, and bf16_weights
(bf16 weights computed in bf16, fp32 masters) both ways. With the state on the host each gradient
moves to its master in host memory as soon as backward has accumulated it, the host's cores run
AdamW, and the masters go back before the next forward (docs/low-memory.md). For each: the median
step time after two warm-up steps, the peak memory (the CPU: the process's resident peak; a GPU: the
caching allocator's peak), and for a host variant the time it adds to its device variant's step,
what share of the step that is, and the bytes that cross a step (each trained parameter's gradient
to the host, its weight back). On the CPU the host is the device: the copies are memory copies on
the cores that compute, so nothing hides behind backward and the added time is their whole cost;
on a GPU the copies queue behind the compute and the goal is a step within 1.3x of the device
state's. Sizes: --size small (CPU: dim 256, 8 blocks, latents [16, 5, 16, 16], batch 2); --size 1.3b
(Wan2.1 T2V 1.3B, 81 frames at 480x832: latents [16, 21, 60, 104], batch 1, bf16 autocast); --size
5b (Wan2.2 TI2V-5B, latents [48, 21, 30, 52]). Random weights, which time like real ones.
"""
import argparse
import json
import re
import tempfile
from pathlib import Path

from bench_runs import experiment, run

SIZES = {
    "small": (dict(preset="tiny", dim=256, num_heads=4, ffn_dim=1024, num_layers=8, in_dim=16, out_dim=16,
                   text_dim=256, text_len=32), "5x16x16", 2, "fp32"),
    "1.3b": (dict(preset="wan2.1-t2v-1.3b", text_len=512), "21x60x104", 1, "bf16"),
    "5b": (dict(preset="wan2.2-ti2v-5b", task="ti2v", text_len=512), "21x30x52", 1, "bf16"),
}


def variants(precision: str):
    """(name, precision.mode, optimizer.state, the variant a host one is measured against)."""
    return [("fp32 weights, state on the device", precision, "device", None),
            ("fp32 weights, state on the host", precision, "host", 0),
            ("bf16_weights, state on the device", "bf16_weights", "device", None),
            ("bf16_weights, state on the host", "bf16_weights", "host", 2)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3,
                        help="the variants run in turn this many times; each reports its fastest round")
    args = parser.parse_args()
    dims, bucket, batch, precision = SIZES[args.size]
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for turn in range(args.rounds):  # in turns: a machine's drift reaches every variant alike
            for i, (name, mode, state, against) in enumerate(variants(precision)):
                config = experiment(tmp, f"v{i}r{turn}", {"name": "wan22_flow_matching", **dims,
                                                            "gradient_checkpointing": True},
                                    args.steps, args.device, bucket, batch, mode)
                c = json.loads(config.read_text())
                c["optimizer"]["state"] = state
                config.write_text(json.dumps(c))
                ms, peak, _, output = run(config)
                masters = re.search(r"master weights: \d+ tensors \(([\d.e+]+)M parameters\)", output)
                parameters = float(masters.group(1)) * 1e6 if masters else 0.0
                if name not in best or ms < best[name][1]:
                    best[name] = (name, ms, peak, against, parameters)
                print(f"round {turn + 1}, {name}: {ms:.1f} ms/step, peak {peak:.0f} MiB", flush=True)
    rows = [best[name] for name, *_ in variants(precision)]
    print(f"\n{args.size} on {args.device}, a DiT trained whole, {args.steps} steps (median after 2; the fastest of "
          f"{args.rounds} rounds):")
    print(f"{'variant':36} {'ms/step':>9} {'peak MiB':>9} {'x time':>7} {'added ms':>9} {'share':>6} {'GB crossed':>11}")
    for name, ms, peak, against, parameters in rows:
        if against is None:
            print(f"{name:36} {ms:9.1f} {peak:9.0f} {'-':>7} {'-':>9} {'-':>6} {'-':>11}")
            continue
        base = rows[against][1]
        # The gradient out as float32 (a bf16 one is widened on the device), the weight back in its dtype.
        crossed = parameters * (4 + (4 if "fp32" in name else 2)) / 1e9
        print(f"{name:36} {ms:9.1f} {peak:9.0f} {ms / base:7.2f} {ms - base:9.1f} {(ms - base) / ms:6.1%} "
              f"{crossed:11.3f}")


if __name__ == "__main__":
    main()
