"""What the step benchmarks share: a small experiment config, running it, and reading back its
median step time and peak memory."""
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WANFW = Path(os.environ.get("WANFW_BUILD_DIR", ROOT / "build")) / "bin" / "wanfw"  # the tests' variable


def experiment(tmp: Path, name: str, model: dict, steps: int, device: str, bucket: str = "5x16x16", batch: int = 2,
               precision: str = "fp32") -> Path:
    """A config training `model` for `steps` on synthetic latents [16, F, H, W] (bucket "FxHxW"),
    `batch` samples a step, under `precision` (fp32, bf16 or fp16)."""
    c = {"run": {"name": name, "output_dir": str(tmp / "runs"), "seed": 1},
         "model": model, "strategy": {"name": "single", "device": device},
         "data": {"num_samples": 64, "batch_size": batch, "workers": 1, "buckets": [bucket]},
         "precision": {"mode": precision},
         "optimizer": {"lr": 1e-4}, "trainer": {"max_steps": steps, "log_every": 1, "progress": "off"},
         "checkpoint": {"every": steps, "keep_last": 1}, "loggers": [{"name": "csv"}]}
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(c))
    return path


def run(path: Path, skip: int = 2):
    """(median ms per step after the first `skip`, peak memory MiB, run folder, console output). The peak is
    the process's resident memory on the CPU and the CUDA caching allocator's peak on a GPU."""
    result = subprocess.run([str(WANFW), "run", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{path.name} failed:\n{result.stdout}\n{result.stderr}")
    c = json.loads(path.read_text())
    folder = Path(c["run"]["output_dir"]) / c["run"]["name"] / "version_0"
    rows = (folder / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    times = [float(r.split(",")[header.index("step_time")]) for r in rows[1 + skip:]]
    memory = re.search(r"peak memory ([\d.]+) MiB(?: \(GPU ([\d.]+) MiB\))?", result.stdout + result.stderr)
    peak = float(memory.group(2) or memory.group(1))
    return statistics.median(times) * 1000, peak, folder, result.stdout + result.stderr


def idle_memory(device: str = "cpu") -> float:
    """Peak RSS of a process that loads LibTorch and the plugins and trains nothing (MiB); 0 on a GPU,
    whose peak counts tensors alone."""
    if device.startswith("cuda"):
        return 0.0
    result = subprocess.run(["/usr/bin/time", "-f", "%M", str(WANFW), "plugins"], capture_output=True, text=True)
    return int(result.stderr.strip().splitlines()[-1]) / 1024
