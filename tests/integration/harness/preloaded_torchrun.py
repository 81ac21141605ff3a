"""The venv's torchrun without its start-up: `torchrun` is a console script that imports
torch.distributed.run and calls its main(); on 2 slow cores the import alone takes about 4 s of
the 4.4 s a launch costs before any rank starts, and the suite launches torchrun hundreds of times.

A server (this file run as a script, one a test process, started at its first launch) imports
torch.distributed.run once; each launch is a child forked from it that runs the same main() on
the same arguments, in a process of its own with the launch's environment and its output in
files, as the console script would. The ranks are started by that main() as by the console
script: real processes of `wanfw` or of a test tool, a real rendezvous, real Gloo. Only what torch
reads from the environment while it is imported comes from the test process's environment instead
of the launch's; no test sets any of it.

The server reads one request a line on stdin (JSON: argv, env, the two output files), forks,
answers `pid N` and, when the child ends, `exit CODE` (negative: the signal that ended it).
"""

import json
import os
import select
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

_server = None  # the server process, and the bytes it wrote past the last answer read
_pending = b""


def _child(request):
    """What `torchrun ARGV` does, with the exit status of the console script: 0, the code of a
    SystemExit, or 1 after the traceback of an exception."""
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for stream, path in ((1, request["out"]), (2, request["err"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), stream)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"]
    code = 0
    try:
        from torch.distributed.run import main
        main(sys.argv[1:])
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: B902 — reported as the interpreter reports an uncaught exception
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve():
    import torch.distributed.run  # noqa: F401 — the import every launch would pay
    print("ready", flush=True)
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            _child(json.loads(line))
        print(f"pid {pid}", flush=True)
        print(f"exit {os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}", flush=True)


def _started():
    global _server, _pending
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _pending = b""
        _expect("ready", None)
    return _server


def _expect(word, timeout):
    """The server's next answer, which starts with `word`; None when `timeout` passes first."""
    global _pending
    while b"\n" not in _pending:
        if timeout is not None and not select.select([_server.stdout], [], [], timeout)[0]:
            return None
        more = os.read(_server.stdout.fileno(), 4096)
        if not more:
            raise RuntimeError(f"the torchrun server ({__file__}) ended, exit status {_server.wait()}")
        _pending += more
    line, _pending = _pending.split(b"\n", 1)
    answer = line.decode().split()
    if not answer or answer[0] != word:
        raise RuntimeError(f"the torchrun server ({__file__}) answered {answer} where it owed '{word}'")
    return answer[1:]


def run(command, timeout, env) -> subprocess.CompletedProcess:
    """subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env) for a
    command whose first word is the venv's torchrun."""
    server = _started()
    with tempfile.TemporaryDirectory(prefix="torchrun-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        argv = list(map(str, command))
        request = {"argv": argv, "env": dict(env), "out": str(out), "err": str(err)}
        server.stdin.write(json.dumps(request).encode() + b"\n")
        server.stdin.flush()
        pid = int(_expect("pid", None)[0])
        ended = _expect("exit", timeout)
        if ended is None:
            os.kill(pid, 9)
            _expect("exit", None)
            raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(command, int(ended[0]), out.read_text(), err.read_text())


if __name__ == "__main__":
    serve()
