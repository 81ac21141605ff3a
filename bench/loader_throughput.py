#!/usr/bin/env python3
"""The data loader against the machine's limit and against what training consumes.

    .venv/bin/python bench/loader_throughput.py [--samples 24] [--workers 2]

1. A data set folder of Wan2.2 TI2V-5B-shaped samples (latents [48, 31, 44, 80] bf16, text up to
   [512, 4096] bf16) from `wanfw data synth`; read once to warm the page cache.
2. Plain reads of the same shard files (Python): into one reused 16 MB buffer (the page cache's
   copy-out rate, an upper bound) and each file into fresh memory (what holding the bytes costs).
3. `wanfw data throughput` (the training loader: workers, memory-mapped shards, every sample checked
   and copied into its batch, text padding) over the same folder, as a GPU run uses it (stored dtype)
   and as a CPU run does (converted to float32): first epoch and 10 epochs, and the ratios to (2).
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


def plain_read(folder: Path, repeats: int, fresh: bool) -> float:
    """MB/s reading every shard file: into one reused 16 MB buffer (the page cache's copy-out rate;
    the buffer stays in the CPU caches), or each file whole into fresh memory (what holding the
    bytes costs: the new pages are faulted in)."""
    files = sorted((folder / "shards").glob("*.safetensors"))
    buffer = memoryview(bytearray(16 << 20))
    total, started = 0, time.perf_counter()
    for _ in range(repeats):
        for path in files:
            with open(path, "rb", buffering=0) as f:
                if fresh:
                    total += len(f.read())
                else:
                    while (n := f.readinto(buffer)) > 0:
                        total += n
    return total / 1e6 / (time.perf_counter() - started)


def loader(folder: Path, workers: int, epochs: int, *extra) -> tuple:
    out = run("data", "throughput", folder, "--workers", workers, "--epochs", epochs, *extra)
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
        plain_read(big, 1, False)  # warm the page cache: every read below is from memory
        reused, fresh = plain_read(big, 5, False), plain_read(big, 5, True)
        print(f"5B-shaped samples ({args.samples}: latents [48, 31, 44, 80] bf16, text [<=512, 4096] bf16), "
              f"page cache warm:")
        print(f"  plain read, one reused 16 MB buffer: {reused:.0f} MB/s")
        print(f"  plain read, each file into fresh memory: {fresh:.0f} MB/s")
        for label, extra in (("for a GPU (stored dtype)", ("--for-gpu",)), ("for the CPU (to float32)", ())):
            _, first_mb, first = loader(big, args.workers, 1, *extra)
            _, steady_mb, steady = loader(big, args.workers, 10, *extra)
            print(f"  loader {label}, first epoch (opens and CRC-checks the shards): {first}")
            print(f"  loader {label}, 10 epochs: {steady}")
            print(f"    ratio to the reused-buffer read: {steady_mb / reused:.2f}; to the fresh-memory read: "
                  f"{steady_mb / fresh:.2f} (target >= 0.5)")

        small = Path(tmp) / "quickstart"
        run("data", "synth", small, "--samples", 512, "--buckets", "5x16x16", "--channels", 4, "--text-dim", 32,
            "--max-tokens", 16)
        small_samples_s, _, small_line = loader(small, args.workers, 3, "--for-gpu")
        train = run("run", ROOT / "examples" / "quickstart.yaml", "--set", f"run.output_dir={tmp}/runs",
                    "--set", "trainer.max_steps=60", "--set", "trainer.progress=off")
        step_samples_s = float(re.search(r"\| ([\d.]+) samples/s \|", train).group(1))
        print("quickstart shapes (latents [4, 5, 16, 16], text [16, 32]):")
        print(f"  wanfw loader, {args.workers} workers: {small_line}")
        print(f"  quickstart training consumes {step_samples_s:.1f} samples/s")
        print(f"  loader / training: {small_samples_s / step_samples_s:.0f}x (target >= 10x)")


if __name__ == "__main__":
    main()
