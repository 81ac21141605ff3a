"""Several ranks on this machine: the real torchrun from the venv on a free loopback port (Gloo),
for `wanfw` or a test tool, and the rank processes a launch started."""

import os
import socket
import subprocess
import sys
from pathlib import Path

from harness.preloaded import Program
from harness.runs import BUILD, WANFW


TORCHRUN = Path(sys.executable).parent / "torchrun"
TEST_TOOLS = BUILD / "bin" / "wanfw_test_tools"  # tests/tools: wanfw_test_tools TOOL ARGS...
# The venv's torchrun without its start-up (preloaded.py): the same main(), forked from a
# server that imported it once. `.run` as subprocess.run, `.start` as subprocess.Popen.
PRELOADED_TORCHRUN = Program(["torch.distributed.run"], main="torch.distributed.run:main")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_on_free_port(command, timeout, env):
    """Runs command(port) on a free port. A port probed free can be taken before torchrun's
    rendezvous listens on it (another process's outgoing connection): torchrun then fails before
    any rank starts, saying EADDRINUSE, and the launch is retried on another port."""
    for attempt in range(3):
        result = PRELOADED_TORCHRUN.run(command(free_port()), timeout, env)
        if result.returncode == 0 or "failed to listen on any local network address" not in result.stderr:
            return result
    return result


def launch(program: Path, *args, nproc=2, timeout=240, extra=(), env=None) -> subprocess.CompletedProcess:
    """Runs `program` on `nproc` processes of the real torchrun (Gloo on loopback, a free port)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return run_on_free_port(lambda port: [str(TORCHRUN), "--no-python", f"--nproc-per-node={nproc}",
                                          "--master-addr=127.0.0.1", f"--master-port={port}", *extra, str(program),
                                          *map(str, args)], timeout, env)


def torchrun(*args, nproc=2, timeout=240, extra=(), env=None) -> subprocess.CompletedProcess:
    """`wanfw ARGS` on `nproc` ranks."""
    return launch(WANFW, *args, nproc=nproc, timeout=timeout, extra=extra, env=env)


def torchrun_tool(tool: str, world: int, *args, timeout=120) -> subprocess.CompletedProcess:
    """`wanfw_test_tools TOOL ARGS` (tests/tools) on `world` ranks."""
    return launch(TEST_TOOLS, tool, *args, nproc=world, timeout=timeout)


def launched_ranks(process: subprocess.Popen) -> dict:
    """{rank: pid} of the wanfw processes `process` runs: itself as rank 0 when it is wanfw, else
    its children (torchrun's workers) by the RANK torchrun gave them. A rank not started yet, or
    one that has just ended, is missing."""
    if process.args[0] == str(WANFW):
        return {0: process.pid}
    ranks = {}
    for task in Path(f"/proc/{process.pid}/task").glob("*"):
        try:
            for pid in (task / "children").read_text().split():
                environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                ranks.update({int(v[5:]): int(pid) for v in environment if v.startswith(b"RANK=")})
        except (OSError, ValueError):
            pass
    return ranks
