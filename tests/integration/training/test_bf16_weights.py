"""precision.mode bf16_weights: the model computes with bf16 trainable weights (no cast per use,
bf16 gradients) while the optimizer steps fp32 master weights, which checkpoints keep. The tiny Wan
DiT with its random noise and timesteps trains to the fp32 run's loss within bf16 rounding, resumes
bitwise, and ends near one device's weights under ddp, accumulation and replicas; fsdp, which keeps fp32 shards as its
masters already, refuses it with the mode to use instead."""

import math

import pytest
import torch

from harness.equivalence import assert_same_training, checkpoint, compare, state
from harness.launch import torchrun
from harness.layouts import BF16_U, CPU, DDP, FSDP, LAYOUTS, WEIGHTS, experiment, run_on, tiny_wan
from harness.runs import losses, wanfw


@pytest.mark.every_vector_unit
def test_bf16_weights_train_the_tiny_wan_to_the_fp32_runs_loss_within_bf16_rounding(tmp_path):
    # The quick start's kind of data (patterns with captions: something to learn), 80 steps.
    learning = {"trainer": {"max_steps": 80}, "optimizer": {"lr": 2e-3},
                "data": {"content": "patterns", "num_samples": 256, "buckets": ["3x8x8"]}}
    model = {**tiny_wan("t2v"), "timestep_sampling": "shift", "shift": 3.0}
    wanfw("run", experiment(tmp_path, "fp32", CPU, 4, model, **learning), check=0)
    result = wanfw("run", experiment(tmp_path, "bf16w", CPU, 4, model, precision=WEIGHTS, **learning), check=0)
    assert "master weights: " in result.stdout and "in bf16 for compute, their fp32 masters on the device" in result.stdout
    fp32, bf16 = losses(tmp_path, "fp32"), losses(tmp_path, "bf16w")
    assert len(fp32) == len(bf16) == 80
    assert fp32 != bf16  # bf16 really computed
    assert sum(bf16[-20:]) < 0.9 * sum(bf16[:20])  # it learns
    # Both runs see the same samples, noise and timesteps (drawn per sample), so their losses differ
    # only through bf16: each predicted element carries a few bf16 roundings (2^-8 relative) and the
    # weights AdamW's steps on bf16 gradients. A loss averages 4 x 768 elements a step, and the
    # last 20 steps are averaged again, so the rounding cancels far below one bf16 unit: allow one.
    first, last = sum(fp32[-20:]) / 20, sum(bf16[-20:]) / 20
    print(f"mean loss of steps 61-80: fp32 {first:.6f}, bf16_weights {last:.6f} ({abs(last - first) / first:.2g})")
    assert abs(last - first) / first < BF16_U
    # The checkpoint holds the fp32 masters, with values bf16 cannot hold (not the bf16 weights).
    saved = state(tmp_path, "bf16w")
    assert all(t.dtype == torch.float32 for t in saved.weights.values())
    assert all(t.dtype == torch.float32 for t in saved.exp_avg_sq.values())
    assert any(not torch.equal(t, t.bfloat16().float()) for t in saved.weights.values())


def test_a_bf16_weights_run_resumes_bitwise_from_its_fp32_masters(tmp_path):
    six = {"trainer": {"max_steps": 6}, "checkpoint": {"every": 3}}
    path = experiment(tmp_path, "resumed", CPU, 4, tiny_wan("t2v"), precision=WEIGHTS, **six)
    wanfw("run", path, check=0)
    uninterrupted = state(tmp_path, "resumed", step=6)
    late = checkpoint(tmp_path, "resumed", step=6)
    for f in late.iterdir():
        f.unlink()
    late.rmdir()
    result = wanfw("run", path, "--resume", "auto", check=0)
    assert "resumed from" in result.stdout
    resumed = state(tmp_path, "resumed", step=6)
    for part in ("weights", "exp_avg", "exp_avg_sq"):
        a, b = getattr(resumed, part), getattr(uninterrupted, part)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b), part


@pytest.mark.every_vector_unit
def test_bf16_weights_end_near_the_weights_of_one_device_on_every_layout(tmp_path):
    # Each rank's gradients are bf16, rounded at each of the ~38 reductions between the loss and a
    # weight, then averaged in bf16 (one more rounding), where one device sums the whole batch
    # before rounding once: they differ by (1 + sqrt(depth)) bf16 units of the largest gradient,
    # CONFIDENCE-free (the errors are not independent enough to promise less). equivalence.py's
    # weight bound counts a first moment's difference only; in bf16 the second moment differs as
    # much (relatively), which doubles it. A rank that missed the average (its own samples'
    # gradient) is off by a sizeable fraction of a gradient, far beyond.
    lr, depth = 1e-3, 16 * 2 + 6
    tolerance = 2 * (1 + math.sqrt(depth)) * BF16_U
    model = tiny_wan("t2v")
    one = run_on(tmp_path, "one_x4", CPU, 4, model, precision=WEIGHTS)
    for name, (strategy, batch, ranks) in LAYOUTS.items():  # ddp, accumulation, both, replicas
        other = run_on(tmp_path, name, strategy, batch, model, ranks, precision=WEIGHTS)
        print(f"bf16_weights, {name} vs 1x4: {assert_same_training(other, one, lr=lr, tolerance=tolerance)}")
    # The bound still tells another batch from the same one: 2 samples a step instead of 4.
    half = compare(run_on(tmp_path, "ddp_2x1", DDP, 1, model, ranks=2, precision=WEIGHTS), one, lr=lr,
                   tolerance=tolerance)
    print(f"bf16_weights, ddp 2x1 (2 samples a step) vs 1x4: {half}")
    assert half.gradients > 1 or half.weights > 1, str(half)


def test_fsdp_refuses_bf16_weights_and_names_the_mode_that_keeps_fp32_shards(tmp_path):
    path = experiment(tmp_path, "sharded", FSDP, 2, tiny_wan("t2v"), precision=WEIGHTS)
    result = torchrun("run", path, nproc=2)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "precision.mode bf16_weights does not combine with a strategy that shards the weights" in output
    assert "use precision.mode bf16" in output
    checked = wanfw("validate", path, check=2)  # `wanfw validate` refuses it too, before any run
    assert "precision.mode bf16_weights does not combine with a strategy that shards the weights" in checked.stderr


def test_model_info_gives_bf16_weights_memory_per_trained_parameter(tmp_path):
    path = experiment(tmp_path, "info", CPU, 4, tiny_wan("t2v"), precision=WEIGHTS)
    info = wanfw("model-info", path, check=0).stdout
    assert ("training state per trained parameter: 16 bytes (bf16 weight 2 + bf16 gradient 2 + fp32 master weight 4 "
            "+ fp32 AdamW moments 8)") in info
    fp32 = wanfw("model-info", experiment(tmp_path, "info32", CPU, 4, tiny_wan("t2v")), check=0).stdout
    assert "training state per trained parameter: 16 bytes (fp32 weight 4 + gradient 4 + AdamW moments 8)" in fp32
