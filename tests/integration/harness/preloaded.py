"""Python programs of the venv without their start-up. `torchrun` is a console script that imports
torch.distributed.run and calls its main(); tools/encode_dataset.py imports torch, transformers
and diffusers. On 2 slow cores those imports take 4 s (torchrun) and 13 s (the encoder) of CPU
before any work starts, and the suite launches them hundreds of times.

A server (this file run as a script: one a program, a test process, started at its first launch)
imports the program's modules once; each launch is a child forked from it that runs the same
main() or script on the same arguments, in a process of its own with the launch's environment
and its output in files, as the program would. What a program starts (torchrun's ranks: real
processes of `wanfw` or of a test tool, a real rendezvous, real Gloo) it starts as it would. Only
what a module reads from the environment while it is imported comes from the test process's
environment instead of the launch's; no test sets any of it.

The server reads one request a line on stdin (JSON: argv, env, the output files, whether the
child leads a session of its own), forks, answers `pid N`, and `exit N CODE` when child N ends
(negative: the signal that ended it); several children may run at once.
"""

import importlib
import json
import os
import runpy
import select
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path


def _child(program, request):
    """What the program does on ARGV, with the exit status of its interpreter: 0, the code of a
    SystemExit, or 1 after the traceback of an exception."""
    if request["session"]:
        os.setsid()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = out if request["err"] == request["out"] else os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"]
    code = 0
    try:
        if program["script"]:
            sys.path.insert(0, str(Path(program["script"]).parent))
            runpy.run_path(program["script"], run_name="__main__")
        else:
            module, function = program["main"].split(":")
            getattr(importlib.import_module(module), function)(sys.argv[1:])
    except SystemExit as stop:  # as the interpreter ends on one: a message goes to stderr, with status 1
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: B902 — reported as the interpreter reports an uncaught exception
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve(program):
    for name in program["preload"]:  # the imports every launch would pay: "module" or "module:attribute"
        module, _, attribute = name.partition(":")
        loaded = importlib.import_module(module)
        if attribute:
            getattr(loaded, attribute)  # a package's lazily imported member
    print("ready", flush=True)
    pending, children = b"", set()
    while True:
        if select.select([0], [], [], 0.02 if children else None)[0]:
            more = os.read(0, 65536)
            if not more:
                return
            pending += more
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = os.fork()
                if pid == 0:
                    _child(program, json.loads(line))
                children.add(pid)
                print(f"pid {pid}", flush=True)
        for pid in list(children):
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                children.discard(pid)
                print(f"exit {pid} {os.waitstatus_to_exitcode(status)}", flush=True)


class Launched:
    """A launch in flight: what subprocess.Popen offers for it (pid, args, poll, wait, returncode)."""

    def __init__(self, program, pid, args):
        self.program, self.pid, self.args, self.returncode = program, pid, args, None

    def poll(self):
        if self.returncode is None:
            self.returncode = self.program._ended(self.pid, 0)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            self.returncode = self.program._ended(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


class Program:
    """A program run from a server that imported `preload` ("module", or "module:attribute" for a
    package's lazily imported member): `main` ("module:function", called with argv[1:]) or `script`
    (a file run as __main__)."""

    def __init__(self, preload, main=None, script=None):
        self.spec = {"preload": list(preload), "main": main, "script": str(script) if script else None}
        self.server, self.pending, self.exits = None, b"", {}

    def start(self, command, env, out, err=None, new_session=False) -> Launched:
        """Starts `command` (its first word the program's, like argv[0]) with its output in the
        files `out` and `err` (default: `out`, both streams in one)."""
        if self.server is None or self.server.poll() is not None:
            self.server = subprocess.Popen([sys.executable, __file__, json.dumps(self.spec)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self.pending, self.exits = b"", {}
            self._answer("ready", None)
        argv = list(map(str, command))
        request = {"argv": argv, "env": dict(env), "out": str(out), "err": str(err or out), "session": new_session}
        self.server.stdin.write(json.dumps(request).encode() + b"\n")
        self.server.stdin.flush()
        return Launched(self, int(self._answer("pid", None)[0]), argv)

    def run(self, command, timeout, env) -> subprocess.CompletedProcess:
        """subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)."""
        with tempfile.TemporaryDirectory(prefix="preloaded-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            launched = self.start(command, env, out, err)
            try:
                code = launched.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(launched.pid, 9)
                launched.wait()
                raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(command, code, out.read_text(), err.read_text())

    def _ended(self, pid, timeout):
        """The exit code of child `pid`; None when `timeout` seconds pass first (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self.exits:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._answer("exit", left) is None:
                return None
        return self.exits[pid]

    def _answer(self, word, timeout):
        """The server's next answer, which starts with `word` (an `exit` of another child on the
        way is kept); None when `timeout` passes first."""
        while True:
            while b"\n" not in self.pending:
                if timeout is not None and not select.select([self.server.stdout], [], [], timeout)[0]:
                    return None
                more = os.read(self.server.stdout.fileno(), 4096)
                if not more:
                    raise RuntimeError(f"the program server ({__file__}) ended, exit status {self.server.wait()}")
                self.pending += more
            line, self.pending = self.pending.split(b"\n", 1)
            answer = line.decode().split()
            if answer and answer[0] == "exit":
                self.exits[int(answer[1])] = int(answer[2])
            if answer and answer[0] == word:
                return answer[1:]
            if not answer or answer[0] not in ("exit", word):
                raise RuntimeError(f"the program server ({__file__}) answered {answer} where it owed '{word}'")


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
