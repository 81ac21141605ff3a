"""Faults at the worst moments of writing a checkpoint: a rank killed between its piece files and
the index, the main process killed before the folder is renamed into place, a rank that hangs
instead of dying, a disk that fills up, a file that vanishes before the checkpoint is complete. Each must leave the previous checkpoint whole, be found
and named, and (killed runs) resume to the uninterrupted run's weights. The moment is reached on
purpose through WANFW_FAULT (host/fault_point.hpp). The tiny Wan DiT under fsdp on 2 ranks
(real torchrun, Gloo on loopback, CPU); the disk through a file-size limit."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from harness.equivalence import trained
from harness.launch import TORCHRUN, free_port, launched_ranks, torchrun
from harness.layouts import experiment, tiny_wan
from harness.runs import WANFW, base_config, checkpoints, write_config

FSDP = {"name": "fsdp", "timeout_s": 60}
FOUR_STEPS = {"trainer": {"max_steps": 4}, "checkpoint": {"every": 2, "keep_last": 0}}


def fsdp_run(tmp_path, name, *args, env=None, strategy=FSDP):
    return torchrun("run", experiment(tmp_path, name, strategy, 2, tiny_wan("t2v"), **FOUR_STEPS), *args, env=env)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("uninterrupted")
    result = fsdp_run(tmp, "whole")
    assert result.returncode == 0, result.stdout + result.stderr
    return trained(checkpoints(tmp / "runs" / "whole" / "version_0")[-1])


@pytest.mark.parametrize("point, rank", [("checkpoint-pieces", 1), ("checkpoint-index", 0),
                                         ("checkpoint-rename", 0)])
@pytest.mark.own_entry
def test_a_rank_killed_while_a_sharded_checkpoint_is_written_leaves_the_last_one_and_resumes_bitwise(
        tmp_path, uninterrupted, point, rank):
    killed = fsdp_run(tmp_path, "killed", env={"WANFW_FAULT": f"{point},rank={rank},step=4"})
    assert killed.returncode != 0 and f"sends itself SIGKILL at {point} (step 4)" in killed.stdout + killed.stderr
    run_dir = tmp_path / "runs" / "killed" / "version_0"
    # Only the whole checkpoint of step 2 counts; what the kill interrupted is not a checkpoint.
    assert [p.name for p in checkpoints(run_dir)] == ["step-00000002"]
    resumed = fsdp_run(tmp_path, "killed", "--resume", "auto")
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout, resumed.stdout + resumed.stderr
    assert [p.name for p in checkpoints(run_dir)] == ["step-00000002", "step-00000004"]
    assert not [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
    end = trained(checkpoints(run_dir)[-1])
    for name in ("weights", "exp_avg", "exp_avg_sq"):  # the same layout: bitwise
        ours, theirs = getattr(end, name), getattr(uninterrupted, name)
        assert set(ours) == set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in theirs), name


def test_a_rank_that_hangs_while_writing_a_checkpoint_is_named_and_every_process_exits(tmp_path):
    started = time.monotonic()
    result = fsdp_run(tmp_path, "hung", env={"WANFW_FAULT": "checkpoint-pieces,rank=1,step=2,signal=STOP"},
                      strategy={"name": "fsdp", "timeout_s": 10})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "sends itself SIGSTOP" in output
    assert "rank 1 stopped responding" in output, output
    assert time.monotonic() - started < 90
    assert checkpoints(tmp_path / "runs" / "hung" / "version_0") == []


def test_a_full_disk_at_a_checkpoint_names_the_file_and_the_free_space_and_keeps_the_previous_one(tmp_path, out):
    config = base_config(out, model={"in_features": 1024, "out_features": 128}, trainer={"max_steps": 10},
                         checkpoint={"every": 10, "keep_last": 0})
    path = write_config(tmp_path / "exp.yaml", config)
    subprocess.run([str(WANFW), "run", str(path)], capture_output=True, text=True, timeout=300, check=True)
    run_dir = out / "exp" / "version_0"
    [previous] = checkpoints(run_dir)
    before = {p.name: p.read_bytes() for p in previous.iterdir()}
    config["trainer"]["max_steps"] = 20
    write_config(path, config)
    # A file-size limit fails the next write as a full disk does (EFBIG instead of ENOSPC).
    result = subprocess.run(["bash", "-c", 'ulimit -f 200 && exec "$0" run "$1" --resume auto', WANFW, path],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "step-00000020" in result.stderr and "model.safetensors: cannot write" in result.stderr, result.stderr
    assert "MiB free on" in result.stderr and "ulimit -f" in result.stderr
    assert checkpoints(run_dir) == [previous]
    assert {p.name: p.read_bytes() for p in previous.iterdir()} == before
    assert not [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
    assert load_file(previous / "model.safetensors")  # still loads


def stopped_process(launched, timeout=120):
    """The rank of `launched` that stopped itself with SIGSTOP."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and launched.poll() is None:
        for pid in launched_ranks(launched).values():
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                    return pid
            except (OSError, IndexError):
                pass
        time.sleep(0.05)
    raise AssertionError(f"no process stopped itself: {launched.communicate()[0][-3000:]}")


@pytest.mark.parametrize("layout, fault, vanished", [
    ("single", "checkpoint-rename,step=4", "model.safetensors"),
    ("fsdp", "checkpoint-pieces,rank=1,step=4", "model-00001-of-00002.safetensors"),
    ("fsdp", "checkpoint-rename,step=4", "optimizer.pieces.json"),
])
def test_a_file_that_vanishes_before_a_checkpoint_is_complete_is_named_with_the_free_space_and_the_last_one_stays(
        tmp_path, layout, fault, vanished):
    """The process stops itself at the point (SIGSTOP); the test deletes the file and continues it."""
    if layout == "single":
        config = base_config(tmp_path / "runs", trainer={"max_steps": 4}, checkpoint={"every": 2, "keep_last": 0})
        config["run"]["name"] = "vanish"
        command = [str(WANFW), "run", str(write_config(tmp_path / "vanish.json", config))]
    else:
        command = [str(TORCHRUN), "--no-python", "--nproc-per-node=2", "--master-addr=127.0.0.1",
                   f"--master-port={free_port()}", str(WANFW), "run",
                   str(experiment(tmp_path, "vanish", FSDP, 2, tiny_wan("t2v"), **FOUR_STEPS))]
    launched = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1", "WANFW_FAULT": f"{fault},signal=STOP"})
    try:
        stopped = stopped_process(launched)
        run_dir = tmp_path / "runs" / "vanish" / "version_0"
        partial = run_dir / "checkpoints" / ".step-00000004.partial"
        (partial / vanished).unlink()
        os.kill(stopped, signal.SIGCONT)
        output, _ = launched.communicate(timeout=120)
    finally:
        if launched.poll() is None:
            launched.kill()
    assert launched.returncode != 0, output
    assert f"checkpoint step-00000004: {partial / vanished} vanished before the checkpoint was complete (" in output
    assert "MiB free on" in output and "the previous checkpoint is intact" in output, output
    assert [p.name for p in checkpoints(run_dir)] == ["step-00000002"]
    assert not [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
    assert trained(checkpoints(run_dir)[0]).step == 2  # the previous checkpoint still reads


def test_a_malformed_fault_setting_is_refused_before_the_first_step(tmp_path):
    path = write_config(tmp_path / "exp.json", base_config(tmp_path / "runs", trainer={"max_steps": 4}))
    result = subprocess.run([str(WANFW), "run", str(path)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "WANFW_FAULT": "checkpoint-renamed,step=2"})
    assert result.returncode != 0
    assert "no point 'checkpoint-renamed'; the points are step-forward, step-gradients" in result.stderr, result.stderr
    assert "step 1/4" not in result.stdout + result.stderr and checkpoints(tmp_path / "runs" / "exp" / "version_0") == []
