"""Per-expert controls of a run that trains both A14B experts (the tiny two-expert Wan DiT, random
noise and timesteps): each expert's learning-rate scale applied to its own parameters and logged,
each expert's loss over the samples routed to it, and each expert's timestep range."""

import pytest
import torch

from harness.layouts import CPU, DDP, LR, experiment, run_on
from harness.runs import metrics, wanfw

EXPERTS = ["high_noise", "low_noise"]
TWO_EXPERTS = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4, "expert": "both", "boundary": 500,
               "timestep_sampling": "logit_normal"}
ONE_STEP = {"trainer": {"max_steps": 1}, "optimizer": {"weight_decay": 0.0}}


def moved(state, before, expert):
    """How far one step moved each of `expert`'s weights from `before`."""
    return {k: state.weights[k] - before.weights[k] for k in state.weights if k.startswith(expert)}


def test_each_expert_steps_at_its_own_learning_rate_and_logs_it(tmp_path):
    # AdamW's first step moves every weight with a gradient by lr times the sign of its gradient
    # (m / sqrt(v) = g / |g|): a quarter of the learning rate moves the expert's weights a quarter
    # as far, and leaves the other expert's as they were.
    start = run_on(tmp_path, "start", CPU, 4, TWO_EXPERTS, trainer={"max_steps": 1}, optimizer={"lr": 1e-30})
    plain = run_on(tmp_path, "plain", CPU, 4, TWO_EXPERTS, **ONE_STEP)
    scaled = run_on(tmp_path, "scaled", CPU, 4, {**TWO_EXPERTS, "high_noise": {"lr_scale": 0.25}}, **ONE_STEP)
    high, high_scaled = moved(plain, start, "high_noise"), moved(scaled, start, "high_noise")
    assert any(d.abs().max() > 0.5 * LR for d in high.values())  # the step had high-noise samples
    for k in high:
        assert torch.allclose(high_scaled[k], 0.25 * high[k], rtol=1e-3, atol=1e-9), k
    low, low_scaled = moved(plain, start, "low_noise"), moved(scaled, start, "low_noise")
    assert all(torch.equal(low_scaled[k], low[k]) for k in low)
    row = metrics(tmp_path, "scaled")[-1]
    assert float(row["lr/high_noise"]) == pytest.approx(0.25 * float(row["lr"]))
    assert float(row["lr/low_noise"]) == pytest.approx(float(row["lr"]))


@pytest.mark.parametrize("layout, batch", [("ddp_2x2", 4), ("data_parallel_2_replicas", 4),
                                           ("data_parallel_2_replicas_of_2_and_1", 3)])
def test_each_experts_loss_is_the_mean_over_its_samples_the_same_on_one_device_and_split(tmp_path, layout, batch):
    run_on(tmp_path, "one", CPU, batch, TWO_EXPERTS)
    if layout == "ddp_2x2":  # a rank whose samples all go to one expert leaves the other's without a gradient
        run_on(tmp_path, "split", {**DDP, "find_unused_parameters": True}, 2, TWO_EXPERTS, ranks=2)
    else:  # a batch of 3 splits 2 + 1 over the replicas
        run_on(tmp_path, "split", {"name": "data_parallel", "devices": ["cpu", "cpu"]}, batch, TWO_EXPERTS)
    both_sides = 0
    for a, b in zip(metrics(tmp_path, "one"), metrics(tmp_path, "split"), strict=True):
        share = float(a["share/high_noise"])
        assert float(b["share/high_noise"]) == share  # the samples' own draws route them alike
        assert share * batch == round(share * batch)  # a whole number of the step's samples
        parts = [(share, "loss/high_noise"), (1 - share, "loss/low_noise")]
        for weight, column in parts:  # an expert without samples in a step logs nothing for it
            assert bool(a[column]) == (weight > 0) and bool(b[column]) == (weight > 0), (a, column)
            if weight > 0:
                assert float(b[column]) == pytest.approx(float(a[column]), rel=1e-5)
        # The step's loss is the experts' losses weighted by their shares of its samples.
        assert float(a["loss"]) == pytest.approx(sum(w * float(a[c]) for w, c in parts if w > 0), rel=1e-6)
        both_sides += 0 < share < 1
    assert both_sides > 0


def test_an_experts_timestep_range_holds_its_samples_and_keeps_each_experts_share(tmp_path):
    ranged = {**TWO_EXPERTS, "high_noise": {"min_timestep": 900}, "low_noise": {"max_timestep": 100}}
    run_on(tmp_path, "whole", CPU, 4, TWO_EXPERTS)
    run_on(tmp_path, "ranged", CPU, 4, ranged)
    for a, b in zip(metrics(tmp_path, "whole"), metrics(tmp_path, "ranged"), strict=True):
        share = float(b["share/high_noise"])
        assert share == float(a["share/high_noise"])  # each sample stays with its expert
        # Every high-noise sample in [0.9, 1], every low-noise one in [0, 0.1].
        sigma = float(b["sigma_mean"])
        assert 0.9 * share - 1e-6 <= sigma <= share + 0.1 * (1 - share) + 1e-6, (share, sigma)


@pytest.mark.parametrize("expert, option, value, says", [
    ("both", "high_noise", {"min_timestep": 400}, "must be a non-empty part of its side of the boundary"),
    ("both", "low_noise", {"lr_scale": -1}, "must be finite and at least 0"),
    ("high_noise", "low_noise", {"lr_scale": 0.5}, "per-expert settings need both experts in the run"),
], ids=["range_across_the_boundary", "negative_scale", "one_expert"])
def test_a_per_expert_setting_that_cannot_hold_is_refused_naming_it(tmp_path, expert, option, value, says):
    path = experiment(tmp_path, "refused", CPU, 4, {**TWO_EXPERTS, "expert": expert, option: value})
    result = wanfw("run", path, check=2)
    assert f"model.{option}.{next(iter(value))}" in result.stderr and says in result.stderr, result.stderr
