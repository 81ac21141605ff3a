"""Models that train in phases (wanfw::TrainingPhase): the test model `linear_regression` with
`bias_phase_steps: N` trains its weight for one step, then its bias for N steps, round and round.
Each phase's steps update only its parameters, its optimizer state counts only its updates, its
learning rate follows its own schedule, and every strategy reduces only the stepped phase's
gradients — so N ranks x B still equal one rank of N x B, and a resumed run continues the cycle."""

import pytest
from safetensors.torch import load_file

from harness.equivalence import checkpoint_file, state
from harness.launch import torchrun
from harness.layouts import assert_same_weights, linear_experiment
from harness.runs import base_config, checkpoints, read_csv, wanfw, write_config

PHASED = {"bias_phase_steps": 2}  # a cycle of 3 steps: weight, bias, bias


def phase_of(step):
    """The phase of 1-based optimizer step `step` in the cycle (weight, bias, bias)."""
    return "weight" if (step - 1) % 3 == 0 else "bias"


def run_phased(tmp_path, name, **sections):
    sections = {"model": PHASED, "trainer": {"max_steps": 6, "log_every": 1}, "checkpoint": {"every": 1,
                "keep_last": 0}, **sections}
    wanfw("run", write_config(tmp_path / f"{name}.yaml", base_config(tmp_path / name, **sections)), check=0)
    return tmp_path / name / "exp" / "version_0"


def test_each_phase_step_changes_only_that_phases_parameters(tmp_path):
    run_dir = run_phased(tmp_path, "phases")
    steps = checkpoints(run_dir)
    assert [s.name for s in steps] == [f"step-{k:08d}" for k in range(1, 7)]
    before = load_file(steps[0] / "model.safetensors")
    for step, folder in enumerate(steps[1:], start=2):
        after = load_file(folder / "model.safetensors")
        trains = {"weight": "linear.weight", "bias": "linear.bias"}[phase_of(step)]
        for name in ("linear.weight", "linear.bias"):
            changed = not (before[name] == after[name]).all()
            assert changed == (name == trains), (step, name)
        before = after


def test_each_parameters_optimizer_state_counts_only_its_phases_updates(tmp_path):
    run_dir = run_phased(tmp_path, "phases")
    optimizer = load_file(checkpoints(run_dir)[-1] / "optimizer.safetensors")
    # 6 steps of the cycle (weight, bias, bias): 2 weight updates, 4 bias updates.
    assert int(optimizer["linear.weight.step"].item()) == 2
    assert int(optimizer["linear.bias.step"].item()) == 4


def test_each_phase_follows_its_own_learning_rate_schedule_and_logs_its_own_loss(tmp_path):
    run_dir = run_phased(tmp_path, "phases", scheduler={"warmup_steps": 2, "decay": "constant"})
    rows = read_csv(run_dir / "metrics.csv")
    # Warm-up over each phase's own first 2 updates: weight at steps 1, 4; bias at 2, 3, 5, 6.
    assert [float(r["lr"]) for r in rows] == pytest.approx([0.025, 0.025, 0.05, 0.05, 0.05, 0.05])
    for row in rows:
        step = int(row["step"])
        assert row[f"{phase_of(step)}/loss"] != "", step
        other = "bias" if phase_of(step) == "weight" else "weight"
        assert row.get(f"{other}/loss", "") == "", step  # a step logs its own phase's loss only


def test_a_phase_step_that_gives_another_phases_parameter_a_gradient_stops_the_run_naming_it(tmp_path):
    path = write_config(tmp_path / "stray.yaml", base_config(
        tmp_path / "stray", model={**PHASED, "stray_gradient": True}, trainer={"max_steps": 3}))
    result = wanfw("run", path)
    assert result.returncode != 0
    assert "step 1: parameter 'linear.bias' got a gradient in a step of training phase 'weight'" in result.stderr
    assert "without autograd" in result.stderr
    assert not (tmp_path / "stray" / "exp" / "version_0" / "checkpoints").exists() or \
        not checkpoints(tmp_path / "stray" / "exp" / "version_0")


def test_a_phased_run_resumed_mid_cycle_ends_bitwise_like_an_uninterrupted_one(tmp_path):
    sections = {"model": PHASED, "trainer": {"max_steps": 8, "log_every": 1},
                "checkpoint": {"every": 5, "keep_last": 0}}
    wanfw("run", write_config(tmp_path / "a.yaml", base_config(tmp_path / "a", **sections)), check=0)
    path = write_config(tmp_path / "b.yaml", base_config(tmp_path / "b", **sections))
    wanfw("run", path, check=0)
    run_dir = tmp_path / "b" / "exp" / "version_0"
    assert checkpoints(run_dir)[0].name == "step-00000005"  # mid-cycle: the 2nd bias step of cycle 2
    wanfw("run", path, "--resume", checkpoints(run_dir)[0], check=0)
    for kind in ("model", "optimizer"):
        a = load_file(checkpoints(tmp_path / "a" / "exp" / "version_0")[-1] / f"{kind}.safetensors")
        b = load_file(checkpoints(run_dir)[-1] / f"{kind}.safetensors")
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].numpy().tobytes() == b[name].numpy().tobytes(), (kind, name)


LAYOUTS = {
    "ddp_2x8": ({"name": "ddp", "timeout_s": 60}, 8, 2),
    "fsdp_2x8": ({"name": "fsdp", "timeout_s": 60}, 8, 2),
    "grad_accum_2x8": ({"name": "grad_accum", "steps": 2, "inner": {"name": "single", "device": "cpu"}}, 8, 1),
    "data_parallel_2_replicas_x16": ({"name": "data_parallel", "devices": ["cpu", "cpu"]}, 16, 1),
}


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("layout", LAYOUTS.keys())
def test_every_strategy_reduces_only_the_stepped_phases_gradients(tmp_path, layout):
    """Without find_unused_parameters, a reduction over both parameters would wait for the one the
    phase leaves without a gradient (ddp stops on it); reducing a zero gradient for it would step
    its AdamW state. Neither happens: the run ends like one rank of batch 16, and each parameter's
    state counts its own phase's updates (5 steps: weight 2, bias 3)."""
    strategy, batch, processes = LAYOUTS[layout]
    wanfw("run", linear_experiment(tmp_path, "reference", {"name": "single", "device": "cpu"}, 16, model=PHASED), check=0)
    path = linear_experiment(tmp_path, layout, strategy, batch, model=PHASED)
    result = torchrun("run", path) if processes > 1 else wanfw("run", path)
    assert result.returncode == 0, result.stdout + result.stderr
    if layout == "ddp_2x8":
        assert "ddp: phase weight: 1 parameters in 1 gradient bucket(s)" in result.stdout + result.stderr
        assert "ddp: phase bias: 1 parameters in 1 gradient bucket(s)" in result.stdout + result.stderr
    reference, run = state(tmp_path, "reference"), state(tmp_path, layout)
    assert_same_weights(run, reference)
    optimizer = checkpoint_file(checkpoints(tmp_path / "runs" / layout / "version_0")[-1], "optimizer")
    assert int(optimizer["linear.weight.step"].item()) == 2
    assert int(optimizer["linear.bias.step"].item()) == 3
