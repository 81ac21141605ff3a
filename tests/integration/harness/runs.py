"""Runs of the built `wanfw` binary and what they leave: where the build is, a small experiment
config, the binary run in the foreground or started in the background, a run's folder, its
checkpoints and its metrics."""

import csv
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path


BUILD = Path(os.environ.get("WANFW_BUILD_DIR", Path(__file__).resolve().parents[3] / "build"))
SOURCE = Path(os.environ.get("WANFW_SOURCE_DIR", Path(__file__).resolve().parents[3]))
WANFW = BUILD / "bin" / "wanfw"
TEST_PLUGINS = BUILD / "lib" / "wanfw" / "test-plugins"
BAD_PLUGINS = BUILD / "lib" / "wanfw" / "bad-plugins"


def base_config(output_dir: Path, **sections) -> dict:
    """A small linear-regression experiment on the CPU; `sections` replace or extend parts."""
    config = {
        "run": {"name": "exp", "output_dir": str(output_dir), "seed": 7},
        "plugin_path": [str(TEST_PLUGINS)],
        "model": {"name": "linear_regression", "in_features": 8, "out_features": 2},
        "strategy": {"name": "single", "device": "cpu"},
        "data": {"num_samples": 256, "batch_size": 16, "workers": 2},
        "optimizer": {"lr": 0.05, "weight_decay": 0.0},
        "trainer": {"max_steps": 40, "log_every": 5, "progress": "lines"},
        "checkpoint": {"every": 10, "keep_last": 0},
        "loggers": [{"name": "csv"}],
    }
    for name, value in sections.items():
        same_plugin = value.get("name", config.get(name, {}).get("name")) == config.get(name, {}).get("name") \
            if isinstance(value, dict) and isinstance(config.get(name), dict) else False
        if same_plugin:  # extend the section; a section naming another plugin replaces it
            config[name] = {**config[name], **value}
        else:
            config[name] = value
    return config


def write_config(path: Path, config: dict) -> Path:
    path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
    return path


def wanfw(*args, timeout=300, check=None, **kwargs) -> subprocess.CompletedProcess:
    """Runs the binary; `check` is the expected exit code (None: any)."""
    result = subprocess.run([str(WANFW), *map(str, args)], capture_output=True, text=True, timeout=timeout, **kwargs)
    if check is not None and result.returncode != check:
        raise AssertionError(
            f"wanfw {' '.join(map(str, args))} exited {result.returncode}, expected {check}\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
        )
    return result


def plugin_abi() -> int:
    """This build's plugin ABI version, as `wanfw --version` prints it."""
    return int(re.search(r"plugin ABI (\d+)", wanfw("--version", check=0).stdout).group(1))


def start_wanfw(*args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([str(WANFW), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **kwargs)


def wait_for(predicate, timeout=120.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def checkpoints(run_dir: Path) -> list:
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith("step-") and (p / "trainer_state.json").exists())


def stop_after(run_dir: Path, step: int) -> None:
    """Leaves the run as if it had stopped after `step`: its later checkpoints removed."""
    for late in checkpoints(run_dir):
        if int(late.name[len("step-"):]) > step:
            shutil.rmtree(late)


def write_run_config(tmp_path: Path, name: str, config: dict) -> Path:
    """`config` as run `name` (its run.name), written to tmp_path/NAME.json."""
    config["run"]["name"] = name
    return write_config(tmp_path / f"{name}.json", config)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_dir(tmp_path, name):
    """The folder of the first run named `name` under tmp_path/runs (base_config's output_dir)."""
    return tmp_path / "runs" / name / "version_0"


def metrics(tmp_path, name):
    """The rows of the run's metrics.csv, as dicts of strings."""
    return read_csv(run_dir(tmp_path, name) / "metrics.csv")


def losses(tmp_path, name, column="loss"):
    """The run's logged values of `column`, as floats (rows that logged none are skipped)."""
    return [float(row[column]) for row in metrics(tmp_path, name) if row.get(column)]
