"""Benchmark: DDP scaling on this machine's CPU cores. The same compute-heavy Wan DiT step
(forward, backward, AdamW) runs as

  1. one rank alone, 1 thread                                  -> t1
  2. two ranks under ddp (torchrun, Gloo over loopback), 1 thread each  -> t2
  3. two independent single-process runs side by side, 1 thread each    -> t2i

Weak scaling (each rank keeps its own batch): efficiency = t1 / t2 (1.0 is perfect). The share of
the DDP step spent communicating and waiting is (t2 - t2i) / t2: runs 2 and 3 compete for the
machine in the same way, and only run 2 exchanges gradients.

    .venv/bin/python bench/ddp_scaling.py [--steps 6] [--rounds 2]

Target: efficiency >= 0.9.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WANFW = ROOT / "build" / "bin" / "wanfw"
TORCHRUN = Path(sys.executable).parent / "torchrun"
# Compute-heavy: 1280 tokens per sample, so a step computes far more than the ~20 MB of
# gradients it exchanges (the ratio a real video model has).
MODEL = dict(name="wan22_flow_matching", preset="tiny", dim=256, num_heads=4, ffn_dim=1024, num_layers=4, in_dim=16,
             out_dim=16, text_dim=256, text_len=32)
LATENT = [16, 5, 32, 32]  # channels, frames, height, width
BATCH = 2
WARMUP = 2


def config(tmp, name, strategy, steps):
    path = Path(tmp) / f"{name}.json"
    path.write_text(json.dumps({
        "run": {"name": name, "output_dir": str(tmp), "seed": 0},
        "model": MODEL,
        "strategy": strategy,
        "data": {"num_samples": 4 * BATCH * steps, "batch_size": BATCH, "workers": 0,
                 "buckets": ["x".join(map(str, LATENT[1:]))]},
        "optimizer": {"lr": 1e-4},
        "trainer": {"max_steps": steps, "log_every": 1, "progress": "off"},
        "checkpoint": {"every": 0, "keep_last": 1},
        "loggers": [{"name": "csv"}],
    }))
    return path


def step_times(tmp, name):
    with open(Path(tmp) / name / "version_0" / "metrics.csv") as f:
        return [float(r["step_time"]) for r in csv.DictReader(f)][WARMUP:]


def run_all(commands, env):
    processes = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
                 for c in commands]
    for p, c in zip(processes, commands):
        _, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"{' '.join(c)} failed ({p.returncode}):\n{err[-3000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--port", type=int, default=29655)
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    steps = args.steps + WARMUP
    single = {"name": "single", "device": "cpu"}
    t1, t2, t2i = [], [], []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            run_all([[str(WANFW), "run", str(config(tmp, "alone", single, steps))]], env)
            t1 += step_times(tmp, "alone")
            ddp = config(tmp, "ddp", {"name": "ddp", "device": "cpu", "timeout_s": 300}, steps)
            run_all([[str(TORCHRUN), "--no-python", "--nproc-per-node=2", f"--master-port={args.port}", str(WANFW),
                      "run", str(ddp)]], env)
            t2 += step_times(tmp, "ddp")
            run_all([[str(WANFW), "run", str(config(tmp, f"side{i}", single, steps))] for i in (0, 1)], env)
            t2i += step_times(tmp, "side0") + step_times(tmp, "side1")
    a, b, c = (statistics.median(t) for t in (t1, t2, t2i))
    latents = LATENT
    print(f"Wan DiT step (dim {MODEL['dim']}, {MODEL['num_layers']} layers, latents {latents}, batch {BATCH} "
          f"per rank), 1 thread per rank, median of {args.rounds} x {args.steps} steps after {WARMUP} warm-up")
    print(f"  1 rank alone                 {a * 1000:8.1f} ms/step")
    print(f"  2 ranks, ddp                 {b * 1000:8.1f} ms/step")
    print(f"  2 independent runs together  {c * 1000:8.1f} ms/step")
    print(f"  scaling efficiency t1/t2: {a / b:.3f}   communication share (t2 - t2i)/t2: {max(0.0, b - c) / b:.3f}")


if __name__ == "__main__":
    main()
