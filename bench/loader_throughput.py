#!/usr/bin/env python3
"""The data loader against the machine's limit and against what training consumes.

    .venv/bin/python bench/loader_throughput.py [--samples 24] [--workers 2]

1. A data set folder of Wan2.2 TI2V-5B-shaped samples (latents [48, 31, 44, 80] bf16, text up to
   [512, 4096] bf16) from `wanfw data synth`; read once to warm the page cache.
2. A plain read of the same shard files (Python, 16 MB reads into one buffer): the machine's limit.
3. `wanfw data throughput` (the training loader: workers, memory-mapped shards, checks, conversion
   to float32, text padding) over the same folder: samples/s and MB/s, and the ratio to (2).
4. The quickstart's training step rate (samples/s of `wanfw run examples/quickstart.yaml`) against
   the loader on a folder of the quickstart's shapes: how many times faster data arrives than the
   step consumes it.
Ratios are measured side by side in one run; the targets are >= 0.5 and >= 10.
"""
import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WANFW = ROOT / "build" / "bin" / "wanfw"


def run(*args, cwd=None):
    result = subprocess.run([str(WANFW), *map(str, args)], capture_output=True, text=True, cwd=cwd)
    if result.returncode != 0:
        sys.exit(f"wanfw {' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def plain_read(folder: Path, repeats: int) -> tuple:
    files = sorted((folder / "shards").glob("*.safetensors"))
    buffer = bytearray(16 << 20)
    view = memoryview(buffer)
    total, started = 0, time.perf_counter()
    for _ in range(repeats):
        for path in files:
            with open(path, "rb", buffering=0) as f:
                while (n := f.readinto(view)) > 0:
                    total += n
    return total / 1e6 / (time.perf_counter() - started), total


def loader(folder: Path, workers: int, epochs: int) -> tuple:
    out = run("data", "throughput", folder, "--workers", workers, "--epochs", epochs)
    m = re.search(r"([\d.]+) samples/s, ([\d.]+) MB/s", out)
    return float(m.group(1)), float(m.group(2)), out.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "ti2v5b"
        run("data", "synth", big, "--samples", args.samples, "--buckets", "31x44x80", "--channels", 48,
            "--text-dim", 4096, "--max-tokens", 512, "--shard-mb", 256)
        plain_read(big, 1)  # warm the page cache: both sides then read from memory
        plain_mb, total = plain_read(big, 3)
        samples_s, loader_mb, line = loader(big, args.workers, 3)
        print(f"5B-shaped samples ({args.samples}, {total / 3 / 1e6:.0f} MB of shards), page cache warm:")
        print(f"  plain read of the shard files: {plain_mb:.0f} MB/s")
        print(f"  wanfw loader, {args.workers} workers: {line}")
        print(f"  loader / plain read: {loader_mb / plain_mb:.2f} (target >= 0.5)")

        small = Path(tmp) / "quickstart"
        run("data", "synth", small, "--samples", 512, "--buckets", "5x16x16", "--channels", 4, "--text-dim", 32,
            "--max-tokens", 16)
        small_samples_s, _, small_line = loader(small, args.workers, 3)
        train = run("run", ROOT / "examples" / "quickstart.yaml", "--set", f"run.output_dir={tmp}/runs",
                    "--set", "trainer.max_steps=60", "--set", "trainer.progress=off")
        step_samples_s = float(re.search(r"\| ([\d.]+) samples/s \|", train).group(1))
        print("quickstart shapes (latents [4, 5, 16, 16], text [16, 32]):")
        print(f"  wanfw loader, {args.workers} workers: {small_line}")
        print(f"  quickstart training consumes {step_samples_s:.1f} samples/s")
        print(f"  loader / training: {small_samples_s / step_samples_s:.0f}x (target >= 10x)")


if __name__ == "__main__":
    main()
