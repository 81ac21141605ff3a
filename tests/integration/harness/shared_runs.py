"""Runs that tests in several CTest entries compare with, made once a build and kept.

A test marked own_entry runs in a process of its own, so a module-scoped fixture cannot share a
run between two of them. A shared run lives under <build>/test-cache/shared-runs/<name>/, guarded
by a file lock (CTest runs entries in parallel processes: the second waits for the first's run
instead of repeating it), and is made again when its config or the build changes."""

import fcntl
import hashlib
import os
import shutil
from pathlib import Path

from harness.equivalence import state
from harness.layouts import experiment
from harness.runs import BUILD, WANFW, wanfw


def build_stamp() -> str:
    """Changes whenever the binary or a library or plugin it loads is rebuilt."""
    h = hashlib.sha256()
    for path in sorted([WANFW, *(BUILD / "lib").glob("*.so"), *(BUILD / "lib" / "wanfw" / "plugins").glob("*.so")]):
        h.update(f"{path}:{path.stat().st_mtime_ns}".encode())
    return h.hexdigest()


def shared_run_on(name, strategy, batch, model, **sections):
    """layouts.run_on on one rank, made once for every test that asks for the same `name` and the
    same config while the build stays the same; returns the run's last checkpoint's state. A run
    made with ATen held to a vector unit (conftest.py's `vector_unit`) is that unit's own."""
    unit = os.environ.get("ATEN_CPU_CAPABILITY")
    name = f"{name}-{unit}" if unit else name
    folder = BUILD / "test-cache" / "shared-runs" / name
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        config = experiment(folder, name, strategy, batch, model, **sections)
        key = hashlib.sha256((Path(config).read_text() + build_stamp()).encode()).hexdigest()
        done = folder / "done"
        if not done.exists() or done.read_text() != key:
            done.unlink(missing_ok=True)
            shutil.rmtree(folder / "runs", ignore_errors=True)
            wanfw("run", config, check=0, timeout=900)
            done.write_text(key)
    return state(folder, name)
