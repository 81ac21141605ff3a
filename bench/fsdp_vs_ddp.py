"""Benchmark: fully sharded (fsdp) against ddp on this machine's CPU, the same Wan DiT step side by side.

1. Bytes communicated per step, measured on the loopback interface (/proc/net/dev: every byte
   Gloo moves between the ranks), against the formulas. With P parameter bytes (Pu in the model's
   units, Pr in the rest) on N ranks, each rank sends per step
     ddp  (all-reduce = reduce-scatter + all-gather)                   2 P (N - 1) / N
     fsdp (units: all-gather forward and backward, reduce-scatter;   3 Pu' (N - 1) / N + 2 Pr' (N - 1) / N
           the rest: gathered once a step, reduce-scattered)
   (P' with the unit padding: ceil(rows / N) rows a rank). A reduce-scatter sends (N - 1) / N of
   its input, as NCCL's ring does; on Gloo, whose own reduce-scatter all-reduces the whole input,
   wanfw reduce-scatters by an all-to-all and a local sum to the same count. Two runs of different
   lengths cancel what set-up sends (rendezvous, the initial weights).
   Hybrid sharding (fsdp replicate R: S = N / R ranks a replica group) on 4 ranks as 2 x 2: each
   rank sends fsdp's formula over its group's S ranks, then an all-reduce of its shard across the
   R groups, 2 (P' / S) (R - 1) / R; model-info's traffic line is this formula.
2. Step time of fsdp over ddp on 2 ranks (1 thread each).
3. Bytes of parameters, gradients and AdamW state each rank holds, on 1, 2 and 4 ranks (fsdp's
   own count of its tensors) against ddp's whole copy.

    .venv/bin/python bench/fsdp_vs_ddp.py [--steps 6]
"""

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from harness.equivalence import checkpoint_file  # noqa: E402

WANFW = Path(os.environ.get("WANFW_BUILD_DIR", ROOT / "build")) / "bin" / "wanfw"
TORCHRUN = Path(sys.executable).parent / "torchrun"
MODEL = dict(name="wan22_flow_matching", preset="tiny", dim=256, num_heads=4, ffn_dim=1024, num_layers=4, in_dim=16,
             out_dim=16, text_dim=256, text_len=32)
BUCKET, BATCH, WARMUP = "5x16x16", 2, 2
HOLDS = re.compile(r"rank (\d) holds (\d+) bytes of parameters \(the model has (\d+)\), (\d+) bytes of gradients "
                   r"and (\d+) bytes of optimizer state")


def config(tmp, name, strategy, steps):
    path = Path(tmp) / f"{name}.json"
    path.write_text(json.dumps({
        "run": {"name": name, "output_dir": str(tmp), "seed": 0}, "model": MODEL, "strategy": strategy,
        "data": {"num_samples": 8 * BATCH * steps, "batch_size": BATCH, "workers": 0, "buckets": [BUCKET]},
        "optimizer": {"lr": 1e-4}, "trainer": {"max_steps": steps, "log_every": 1, "progress": "off"},
        "checkpoint": {"every": 0, "keep_last": 1}, "loggers": [{"name": "csv"}]}))
    return path


def loopback_bytes():
    for line in Path("/proc/net/dev").read_text().splitlines():
        if line.strip().startswith("lo:"):
            return int(line.split(":")[1].split()[8])  # transmitted
    sys.exit("no loopback interface in /proc/net/dev")


def launch(path, ranks, port):
    """Runs the config on `ranks` ranks; returns (loopback bytes sent meanwhile, console output)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "WANFW_LOG_ALL_RANKS": "1"}
    before = loopback_bytes()
    command = [str(TORCHRUN), "--no-python", f"--nproc-per-node={ranks}", f"--master-port={port}", str(WANFW), "run",
               str(path)]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return loopback_bytes() - before, result.stdout + result.stderr


def step_times(tmp, name):
    with open(Path(tmp) / name / "version_0" / "metrics.csv") as f:
        return [float(r["step_time"]) for r in csv.DictReader(f)][WARMUP:]


def formulas(tmp, name, ranks):
    """Bytes a rank sends per step by the formulas above, from the checkpoint's shapes."""
    folder = sorted((Path(tmp) / name / "version_0" / "checkpoints").glob("step-*"))[-1]
    units = rest = units_padded = rest_padded = 0
    for key, t in checkpoint_file(folder, "model").items():
        rows = t.shape[0] if t.dim() else 1
        padded = -(-rows // ranks) * ranks * (t.numel() // rows if rows else 0) * t.element_size()
        if key.startswith("blocks."):
            units, units_padded = units + t.nbytes, units_padded + padded
        else:
            rest, rest_padded = rest + t.nbytes, rest_padded + padded
    share = (ranks - 1) / ranks
    return 2 * (units + rest) * share, (3 * units_padded + 2 * rest_padded) * share, units + rest


def hybrid_formula(tmp, name, ranks, replicas):
    """Bytes a rank sends per step under fsdp replicate `replicas` on `ranks` ranks: fsdp's formula
    over a group's ranks, and an all-reduce of the rank's shard (1/S of the padded P) across groups."""
    shards = ranks // replicas
    _, within, _ = formulas(tmp, name, shards)
    folder = sorted((Path(tmp) / name / "version_0" / "checkpoints").glob("step-*"))[-1]
    padded = 0
    for t in checkpoint_file(folder, "model").values():
        rows = t.shape[0] if t.dim() else 1
        padded += -(-rows // shards) * shards * (t.numel() // rows if rows else 0) * t.element_size()
    return within + 2 * (padded / shards) * (replicas - 1) / replicas


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--port", type=int, default=29671)
    args = parser.parse_args()
    short, long = WARMUP + 2, WARMUP + 2 + args.steps
    strategies = {"ddp": {"name": "ddp", "device": "cpu", "timeout_s": 300},
                  "fsdp": {"name": "fsdp", "device": "cpu", "timeout_s": 300}}
    sent, times, held = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, strategy in strategies.items():
            few, _ = launch(config(tmp, f"{name}_short", strategy, short), 2, args.port)
            many, out = launch(config(tmp, f"{name}_long", strategy, long), 2, args.port)
            sent[name] = (many - few) / (long - short) / 2  # per step, per rank
            times[name] = statistics.median(step_times(tmp, f"{name}_long"))
        ddp_formula, fsdp_formula, model_bytes = formulas(tmp, "fsdp_long", 2)
        hybrid = {}  # 4 ranks: plain fsdp, and 2 replica groups of 2
        for name, strategy in (("fsdp_4", strategies["fsdp"]), ("hybrid_2x2", {**strategies["fsdp"], "replicate": 2})):
            few, _ = launch(config(tmp, f"{name}_short", strategy, short), 4, args.port)
            many, _ = launch(config(tmp, f"{name}_long", strategy, long), 4, args.port)
            hybrid[name] = (many - few) / (long - short) / 4
        hybrid_formulas = {"fsdp_4": formulas(tmp, "fsdp_4_long", 4)[1],
                           "hybrid_2x2": hybrid_formula(tmp, "hybrid_2x2_long", 4, 2)}
        for ranks in (1, 2, 4):
            _, out = launch(config(tmp, f"held_{ranks}", strategies["fsdp"], 1), ranks, args.port)
            held[ranks] = max((tuple(map(int, m[1:])) for m in HOLDS.findall(out)), default=None)

    print(f"Wan DiT (dim {MODEL['dim']}, {MODEL['num_layers']} blocks, {model_bytes / 2**20:.1f} MiB of fp32 "
          f"parameters), latents {BUCKET}, batch {BATCH} a rank, 2 CPU ranks (Gloo over loopback), 1 thread each")
    print("bytes sent per step and rank (loopback, measured) against the formula:")
    for name, formula in (("ddp", ddp_formula), ("fsdp", fsdp_formula)):
        print(f"  {name:5s} {sent[name] / 2**20:8.2f} MiB   formula {formula / 2**20:8.2f} MiB   "
              f"measured/formula {sent[name] / formula:.3f}")
    print(f"  fsdp/ddp {sent['fsdp'] / sent['ddp']:.3f} (formula {fsdp_formula / ddp_formula:.3f})")
    print("on 4 ranks, plain fsdp and 2 replica groups of 2 (fsdp replicate 2):")
    for name, measured in hybrid.items():
        print(f"  {name:10s} {measured / 2**20:8.2f} MiB   formula {hybrid_formulas[name] / 2**20:8.2f} MiB   "
              f"measured/formula {measured / hybrid_formulas[name]:.3f}")
    print(f"step time (median of {args.steps} after {WARMUP} warm-up): ddp {times['ddp'] * 1000:.1f} ms, "
          f"fsdp {times['fsdp'] * 1000:.1f} ms, fsdp/ddp {times['fsdp'] / times['ddp']:.3f}")
    print("bytes each rank holds between steps (fsdp; ddp holds the whole model on every rank):")
    for ranks, h in held.items():
        parameters, whole, gradients, optimizer = h
        print(f"  {ranks} rank(s): parameters {parameters / 2**20:6.2f} MiB, gradients {gradients / 2**20:6.2f} MiB, "
              f"AdamW {optimizer / 2**20:6.2f} MiB = {(parameters + gradients + optimizer) / (4 * whole):.3f} of "
              f"ddp's {4 * whole / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
