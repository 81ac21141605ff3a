"""A rank that stops (SIGSTOP: a hung node, a debugger) before the process group forms: the other
ranks wait for it only the strategy's timeout, name it, and every process of the job exits. (A
rank stopped later, while a checkpoint is written, is test_checkpoint_faults.py's.) Real torchrun,
Gloo on loopback, the tiny Wan DiT under ddp."""
import os
import signal
import subprocess
import time

from harness.launch import TORCHRUN, free_port, launched_ranks
from harness.layouts import experiment, tiny_wan
from harness.runs import WANFW


def test_a_rank_stopped_before_the_rendezvous_is_named_and_every_process_exits(tmp_path):
    config = experiment(tmp_path, "stopped", {"name": "ddp", "timeout_s": 10}, 2, tiny_wan("t2v"))
    launched = subprocess.Popen(
        [str(TORCHRUN), "--no-python", "--nproc-per-node=2", "--master-addr=127.0.0.1", f"--master-port={free_port()}",
         str(WANFW), "run", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True)
    try:
        stopped = None
        while stopped is None and launched.poll() is None:  # rank 1 the moment torchrun starts it
            if 1 in (ranks := launched_ranks(launched)):
                os.kill(ranks[1], signal.SIGSTOP)
                stopped = time.monotonic()
        output, _ = launched.communicate(timeout=150)
    finally:
        if launched.poll() is None:
            os.killpg(launched.pid, signal.SIGKILL)
    assert stopped is not None and launched.returncode != 0, output
    assert "rank 0: forming the process group failed" in output or "rank 0: joining the process group failed" in output
    assert "rank 1 never joined" in output or "rank 1 stopped responding" in output, output
    # The others waited one timeout (10 s); torchrun then ends the stopped rank (SIGTERM, 30 s later SIGKILL).
    assert time.monotonic() - stopped < 90
