"""What the step benchmarks share: a small experiment config, running it, and reading back its
median step time and peak memory."""
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WANFW = ROOT / "build" / "bin" / "wanfw"


def experiment(tmp: Path, name: str, model: dict, steps: int, device: str) -> Path:
    """A config training `model` for `steps` on synthetic latents [16, 5, 16, 16], batch 2."""
    c = {"run": {"name": name, "output_dir": str(tmp / "runs"), "seed": 1},
         "model": model, "strategy": {"name": "single", "device": device},
         "data": {"num_samples": 64, "batch_size": 2, "workers": 1, "buckets": ["5x16x16"]},
         "optimizer": {"lr": 1e-4}, "trainer": {"max_steps": steps, "log_every": 1, "progress": "off"},
         "checkpoint": {"every": steps, "keep_last": 1}, "loggers": [{"name": "csv"}]}
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(c))
    return path


def run(path: Path):
    """(median ms per step after the first two, peak memory MiB, run folder, console output)."""
    result = subprocess.run([str(WANFW), "run", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{path.name} failed:\n{result.stdout}\n{result.stderr}")
    c = json.loads(path.read_text())
    folder = Path(c["run"]["output_dir"]) / c["run"]["name"] / "version_0"
    rows = (folder / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    times = [float(r.split(",")[header.index("step_time")]) for r in rows[3:]]
    peak = float(re.search(r"peak memory ([\d.]+) MiB", result.stdout + result.stderr).group(1))
    return statistics.median(times) * 1000, peak, folder, result.stdout + result.stderr


def idle_memory() -> float:
    """Peak RSS of a process that loads LibTorch and the plugins and trains nothing (MiB)."""
    result = subprocess.run(["/usr/bin/time", "-f", "%M", str(WANFW), "plugins"], capture_output=True, text=True)
    return int(result.stderr.strip().splitlines()[-1]) / 1024
