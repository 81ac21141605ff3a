"""Where a run happens does not change what it computes: the tiny Wan DiT with its stochastic
flow-matching objective ends with the same weights on one device, on two ranks, with accumulated
micro-batches and with data-parallel replicas (every random draw is keyed by its sample), also
across a resume on another world size. And every rank agrees on when to stop: a signal to one rank
or a NaN on one rank stops all of them at the same step. Real torchrun, Gloo on loopback, CPU."""

import json
import os
import signal
import subprocess
import time

import pytest
import torch

from harness.equivalence import assert_same_training, largest_relative_difference, rounding, state, weights
from harness.launch import free_port, torchrun
from harness.layouts import (CPU, DDP, FSDP, LAYOUTS, LR, TINY_WAN, assert_resumed_from_step_3, experiment, run_on,
                             tiny_wan)
from harness.runs import WANFW, checkpoints, metrics, stop_after, wait_for, wanfw

# The strategies whose ranks must agree on every stop (fsdp: the test model, without units, is
# gathered whole for each step; its state and checkpoints are sharded all the same).
AGREEING = pytest.mark.parametrize("distributed", [DDP, FSDP], ids=["ddp", "fsdp"])


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("task", ["t2v", "ti2v", "i2v"])
def test_the_tiny_wan_model_ends_with_the_same_weights_on_every_layout(tmp_path, task):
    reference = run_on(tmp_path, "single_1x4", CPU, 4, tiny_wan(task), checkpoint={"every": 1})
    comparisons = {name: assert_same_training(run_on(tmp_path, name, strategy, batch, tiny_wan(task), ranks),
                                              reference, lr=LR, tolerance=TINY_WAN)
                   for name, (strategy, batch, ranks) in LAYOUTS.items()}
    print(f"{task}: " + "; ".join(f"{name}: {c}" for name, c in comparisons.items()))
    # Steps 2 to 5 moved the weights far more than the layouts differ: equality is not for want of training.
    trained_since_step_1 = largest_relative_difference(reference.weights, weights(tmp_path, "single_1x4", step=1))
    assert trained_since_step_1 > 100 * max(c.relative for c in comparisons.values())


@pytest.mark.every_vector_unit
def test_a_run_resized_from_two_ranks_to_one_resumes_to_the_weights_of_the_uninterrupted_run(tmp_path):
    model = tiny_wan("t2v")
    six = {"trainer": {"max_steps": 6}, "checkpoint": {"every": 3}}
    path = experiment(tmp_path, "resized", DDP, 2, model, **six)
    result = torchrun("run", path)
    assert result.returncode == 0, result.stdout + result.stderr
    uninterrupted = state(tmp_path, "resized", step=6)
    # Stopped after step 3 (its later checkpoint removed), continued on one rank x 4.
    run_dir = tmp_path / "runs" / "resized" / "version_0"
    stop_after(run_dir, 3)
    resumed = wanfw("run", experiment(tmp_path, "resized", CPU, 4, model, **six), "--resume", "auto", check=0)
    c = assert_resumed_from_step_3(tmp_path, resumed, "written by 2 processes and resumes on 1", uninterrupted,
                                   weights(tmp_path, "resized", step=3), TINY_WAN)
    print(f"resumed on one rank vs two: {c}")


def linear(**faults):
    return {"name": "linear_regression", "in_features": 8, "out_features": 2, "step_delay_ms": 40, **faults}


def two_ranks(*args):
    """`wanfw run ARGS` as ranks 0 and 1 of a job, each started on its own (as srun does)."""
    port = free_port()
    return [subprocess.Popen([str(WANFW), "run", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(rank), "WORLD_SIZE": "2",
                                             "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                                             "MASTER_PORT": str(port)})
            for rank in (0, 1)]


def finish(processes, timeout=240):
    outputs = [p.communicate(timeout=timeout) for p in processes]
    return [p.returncode for p in processes], outputs


@pytest.mark.own_entry  # two stops on 2 ranks each, about 45 s: beside the concern entry, not in it
@AGREEING
def test_a_stop_signal_to_one_rank_stops_both_at_the_same_step_with_one_checkpoint(tmp_path, distributed):
    long_run = {"trainer": {"max_steps": 200}}
    path = experiment(tmp_path, "signalled", distributed, 4, linear(), **long_run)
    processes = two_ranks(path)
    run_dir = tmp_path / "runs" / "signalled" / "version_0"
    wait_for(lambda: (run_dir / "metrics.csv").exists() and len((run_dir / "metrics.csv").read_text().splitlines()) > 4,
             timeout=120, what="a few logged steps")
    processes[1].send_signal(signal.SIGTERM)  # rank 1 only
    sent = time.monotonic()
    codes, outputs = finish(processes, timeout=60)
    assert time.monotonic() - sent < 30
    assert codes[0] == codes[1] == 1, (codes, outputs)
    assert "stopped by signal 15" in outputs[0][1]
    saved = checkpoints(run_dir)
    assert len(saved) == 1
    step = json.loads((saved[0] / "trainer_state.json").read_text())["step"]
    assert 4 <= step < 200
    # Resumed (same layout), the run ends bitwise where an uninterrupted one does.
    codes, outputs = finish(two_ranks(path, "--resume", "auto"))
    assert codes == [0, 0], outputs
    assert f"step-{step:08d}" in outputs[0][0]
    codes, outputs = finish(two_ranks(experiment(tmp_path, "reference", distributed, 4, linear(), **long_run)))
    assert codes == [0, 0], outputs
    a, b = weights(tmp_path, "signalled"), weights(tmp_path, "reference")
    assert all(torch.equal(a[k], b[k]) for k in b)


@AGREEING
def test_a_nan_on_one_rank_stops_every_rank_naming_that_rank_and_the_step(tmp_path, distributed):
    path = experiment(tmp_path, "nan", distributed, 4, linear(nan_at_call=5, nan_rank=1),
                      checkpoint={"every": 2})
    codes, outputs = finish(two_ranks(path), timeout=120)
    assert codes == [1, 1], outputs
    assert "step 5: metric 'loss' is nan on rank 1 (NaN guard)" in outputs[1][1]
    assert "step 5: metric 'loss' is not finite on rank 1 (NaN guard); every rank stopped" in outputs[0][1]
    saved = checkpoints(tmp_path / "runs" / "nan" / "version_0")
    assert [p.name for p in saved] == ["step-00000002", "step-00000004"]
    assert "the last checkpoint" in outputs[0][1] and "step-00000004, is intact" in outputs[0][1]


def test_data_parallel_replicas_hold_the_resumed_frozen_parameters_and_buffers(tmp_path):
    # The test model's replicas start from weights of their own; its loss reads a frozen parameter
    # and a buffer that counts training steps, so a replica that missed any of them after the resume
    # would compute other gradients than the one-device run.
    model = linear(frozen_state=True, step_delay_ms=0)
    six = {"trainer": {"max_steps": 6}, "checkpoint": {"every": 3}}
    replicas = {"name": "data_parallel", "devices": ["cpu", "cpu"]}
    wanfw("run", experiment(tmp_path, "dp", replicas, 8, model, **six), check=0)
    run_dir = tmp_path / "runs" / "dp" / "version_0"
    last = checkpoints(run_dir)[-1]
    for f in last.iterdir():
        f.unlink()
    last.rmdir()
    wanfw("run", experiment(tmp_path, "dp", replicas, 8, model, **six), "--resume", "auto", check=0)
    wanfw("run", experiment(tmp_path, "one", CPU, 8, model, **six), check=0)
    resumed = state(tmp_path, "dp")
    assert float(resumed.weights["steps_seen"]) == 6 * 1  # the main copy's buffer, restored and counted on
    # The linear model's gradients: sums over the batch of 8 of products over its 8 inputs.
    assert_same_training(resumed, state(tmp_path, "one"), lr=LR, tolerance=rounding(8 * 8, 2))


def test_epochs_with_accumulation_are_whole_steps_and_the_plan_says_what_is_left_over(tmp_path):
    # 40 samples, 3 micro-batches of 4 per step: steps of 12 samples, 4 left over each epoch.
    strategy = {"name": "grad_accum", "steps": 3, "inner": CPU}
    for drop_last, steps, leftovers in ((True, 3, "4 left over, skipped this epoch (others next epoch; data.drop_last)"),
                                        (False, 4, "4 left over, completed with 8 repeated")):
        name = f"epochs_{drop_last}"
        path = experiment(tmp_path, name, strategy, 4, linear(step_delay_ms=0),
                          data={"num_samples": 40, "drop_last": drop_last}, trainer={"max_steps": 0, "epochs": 2})
        result = wanfw("run", path, check=0)
        assert f"40 samples, batch 4 per device, {steps} steps of 12 per epoch, {leftovers}" in result.stdout
        state = json.loads((checkpoints(tmp_path / "runs" / name / "version_0")[-1] / "trainer_state.json").read_text())
        assert (state["step"], state["epoch"], state["batch_in_epoch"], state["samples_in_epoch"]) == \
            (2 * steps, 1, 3 * steps, 12 * steps)
        assert len(metrics(tmp_path, name)) == 2 * steps


def test_under_torchrun_a_nan_on_one_rank_ends_the_job_with_both_ranks_naming_it(tmp_path):
    path = experiment(tmp_path, "nan_torchrun", DDP, 4, linear(nan_at_call=3, nan_rank=1, step_delay_ms=0))
    started = time.monotonic()
    result = torchrun("run", path, timeout=120)
    assert result.returncode != 0
    assert time.monotonic() - started < 60
    output = result.stdout + result.stderr
    assert "step 3: metric 'loss' is nan on rank 1 (NaN guard)" in output
    assert "step 3: metric 'loss' is not finite on rank 1 (NaN guard); every rank stopped" in output
