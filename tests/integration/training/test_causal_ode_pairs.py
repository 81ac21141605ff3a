"""A causal student's first stage (Self Forcing's causal initialisation) on the tiny Wan DiT: a
bidirectional teacher's ODE pairs, written by `wanfw sample --dataset` with
model.sample_trajectory_steps (its Euler states at the student's levels beside its final sample and
the prompt), and the causal regression on them (model.causal.training: ode_pairs). The states are
those of diffusers' transformer run by the same Euler steps; the regression trains the student
toward the teacher's samples and ends at one device's weights on any layout; pairs recorded at
other levels, and a teacher's schedule that passes no step at a level, are refused naming what to
change."""

import json

import pytest
import torch
from safetensors import safe_open

from harness.equivalence import assert_same_training, state
from harness.launch import torchrun
from harness.layouts import CPU, DDP, LAYOUTS, LR, TINY_WAN, experiment
from harness.references import OfficialReference, reference_folder
from harness.runs import losses, read_csv, wanfw

LEVELS = [1000, 750, 500, 250]  # the student's steps, warped by sample_shift 5: 1000, 937.5, 833.3, 625


def make_pairs(tmp_path, steps=8, trajectory=(1000, 500), count=24, teacher_seed=3, task="t2v", bucket="4x4x4"):
    """The tiny diffusers teacher's pairs for `count` prompts of the synthetic set at `bucket` latents:
    `steps` Euler steps at shift 5, its states at `trajectory`. Returns the teacher folder and the pairs'."""
    teacher = reference_folder(tmp_path / "teacher", seed=teacher_seed)
    model = {"name": "wan22_flow_matching", "preset": "tiny", "task": task, "weights": str(teacher),
             "sample_guidance": 1.0, "sample_steps": steps, "sample_shift": 5.0,
             "sample_trajectory_steps": list(trajectory)}
    path = experiment(tmp_path, "teacher", CPU, 4, model, data={"buckets": [bucket], "num_samples": count})
    wanfw("sample", path, "--dataset", "--out", tmp_path / "pairs", "--count", count, "--batch", 8, "--device", "cpu",
          check=0)
    return teacher, tmp_path / "pairs"


def read_pairs(folder):
    """Each sample's fields as the data set folder holds them, in manifest order."""
    manifest = json.loads((folder / "manifest.json").read_text())
    out = []
    for sample in manifest["samples"]:
        fields = {}
        for name, where in sample["fields"].items():
            with safe_open(folder / where["shard"], "pt") as f:
                fields[name] = f.get_tensor(where["tensor"])
        out.append(fields)
    return out


def on_pairs(tmp_path, name, strategy, batch, model, folder, ranks=1, check=0, **sections):
    """The layouts' experiment trained on the data set folder of pairs; runs it (on `ranks`) and
    returns the finished process."""
    path = experiment(tmp_path, name, strategy, batch, model, **sections)
    config = json.loads(path.read_text())
    config["data"] = {"name": "latent_shards", "path": str(folder), "batch_size": batch, "workers": 0}
    path.write_text(json.dumps(config))
    if ranks == 1:
        return wanfw("run", path, check=check)
    result = torchrun("run", path, nproc=ranks)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def student(**model):
    return {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 16, "sample_shift": 5.0,
            "causal": {"frames_per_chunk": 2, "training": "ode_pairs", "steps": LEVELS}, **model}


def test_the_pairs_hold_the_teachers_euler_states_at_the_students_levels_as_diffusers_computes_them(tmp_path):
    teacher, folder = make_pairs(tmp_path, steps=8, trajectory=(1000, 500))
    pairs = read_pairs(folder)
    assert len(pairs) == 24
    reference = OfficialReference(teacher)
    sigmas = [5 * u / (1 + 4 * u) for u in (1 - i / 8 for i in range(9))]  # 8 steps at shift 5
    for sample in pairs[:4]:
        trajectory, final = sample["trajectory"].float(), sample["latents"].float()
        assert trajectory.shape == (2, 4, 4, 4, 4)
        assert sample["trajectory_timesteps"].tolist() == pytest.approx([1000.0, 833.3333], abs=1e-3)
        x = trajectory[0:1]  # the state at level 1: the sampler's noise
        states = {0: x}
        with torch.no_grad():
            for i in range(8):
                v = reference(x, torch.tensor([1000.0 * sigmas[i]]), sample["context"].float()[None]).sample
                x = x + (sigmas[i + 1] - sigmas[i]) * v
                states[i + 1] = x
        # Stored in bfloat16: 2^-8 of each value, and the steps' float32 rounding far below it.
        torch.testing.assert_close(trajectory[1], states[4][0], rtol=2 ** -7, atol=2 ** -7)
        torch.testing.assert_close(final, states[8][0], rtol=2 ** -7, atol=2 ** -7)


def test_the_causal_regression_on_the_pairs_trains_the_student_whose_loss_falls(tmp_path):
    teacher, folder = make_pairs(tmp_path, steps=8, trajectory=LEVELS, count=64)
    on_pairs(tmp_path, "ode", CPU, 4, student(weights=str(teacher)), folder, trainer={"max_steps": 48, "log_every": 1})
    loss = losses(tmp_path, "ode")
    assert len(loss) == 48 and sum(loss[-8:]) / 8 < 0.7 * sum(loss[:8]) / 8, loss


@pytest.mark.parametrize("layout", ["ddp_2x2", "ddp_2x1_accum_2", "ddp_sp2_1x4"])
def test_the_causal_regression_ends_at_one_devices_weights_on_any_layout(tmp_path, layout):
    # Each chunk's state is drawn from the sample's own stream (sequence parallel: each rank of the
    # pair holds the same samples, and the same draws).
    teacher, folder = make_pairs(tmp_path, steps=8, trajectory=LEVELS)
    model = student(weights=str(teacher))
    strategy, batch, ranks = {**LAYOUTS, "ddp_sp2_1x4": ({**DDP, "sequence_parallel": 2}, 4, 2)}[layout]
    on_pairs(tmp_path, "one", CPU, 4, model, folder)
    on_pairs(tmp_path, layout, strategy, batch, model, folder, ranks)
    assert_same_training(state(tmp_path, layout), state(tmp_path, "one"), lr=LR, tolerance=TINY_WAN)


def test_a_ti2v_teachers_pairs_keep_the_image_and_train_a_first_frame_student_as_one_device_with_ddp(tmp_path):
    # i2v from a first frame: the teacher keeps latent frame 0 (the data's image) in every state; the
    # student's frame 0 is a chunk of its own at t = 0, out of the loss, its later chunks' states
    # drawn from the sample's stream.
    teacher, folder = make_pairs(tmp_path, steps=8, trajectory=LEVELS, task="ti2v", bucket="5x4x4")
    for sample in read_pairs(folder)[:4]:
        assert sample["trajectory"].shape == (4, 4, 5, 4, 4)
        assert torch.equal(sample["trajectory"][:, :, 0], sample["latents"][None, :, 0].expand(4, -1, -1, -1))
    causal = {"frames_per_chunk": 2, "independent_first_frame": True, "training": "ode_pairs", "steps": LEVELS}
    model = student(weights=str(teacher), task="ti2v", causal=causal)
    on_pairs(tmp_path, "one", CPU, 4, model, folder)
    on_pairs(tmp_path, "ddp", DDP, 2, model, folder, 2)
    assert_same_training(state(tmp_path, "ddp"), state(tmp_path, "one"), lr=LR, tolerance=TINY_WAN)


def test_an_expert_pair_regresses_each_samples_chunks_on_one_side_as_one_device_with_ddp(tmp_path):
    # Boundary 875: levels 1000 and 937.5 are the high-noise expert's, 833.3 and 625 the low-noise one's.
    _, folder = make_pairs(tmp_path, steps=8, trajectory=LEVELS)
    model = student(expert="both", boundary=875)
    on_pairs(tmp_path, "one", CPU, 4, model, folder)
    on_pairs(tmp_path, "ddp", {**DDP, "find_unused_parameters": True}, 2, model, folder, 2)
    assert_same_training(state(tmp_path, "ddp"), state(tmp_path, "one"), lr=LR, tolerance=TINY_WAN)
    rows = read_csv(tmp_path / "runs" / "one" / "version_0" / "metrics.csv")
    steps = [float(r["ode_step_mean"]) for r in rows]
    shares = [float(r["share/high_noise"]) for r in rows]
    # A step's mean state index: a sample of each side averages 0.5 (high) or 2.5 (low).
    for mean, share in zip(steps, shares):
        assert abs(mean - (0.5 * share + 2.5 * (1 - share))) <= 0.5, (steps, shares)


def test_pairs_recorded_at_other_levels_than_the_students_are_refused_naming_both(tmp_path):
    _, folder = make_pairs(tmp_path, steps=8, trajectory=(1000, 750, 500, 250))
    result = on_pairs(tmp_path, "ode", CPU, 4, student(sample_shift=3.0), folder, check=1, trainer={"max_steps": 1})
    message = result.stdout + result.stderr
    assert "the ODE pairs were recorded at t = " in message and "sample_shift 3" in message, message
    assert "record the pairs with sample_trajectory_steps equal to the student's causal.steps" in message


def test_a_teachers_schedule_that_passes_no_step_at_a_level_is_refused_naming_sample_steps(tmp_path):
    # 50 steps at shift 5 miss 937.5 (the grid at 48 holds it).
    teacher = reference_folder(tmp_path / "teacher", seed=3)
    model = {"name": "wan22_flow_matching", "preset": "tiny", "weights": str(teacher), "sample_steps": 50,
             "sample_shift": 5.0, "sample_trajectory_steps": LEVELS}
    path = experiment(tmp_path, "teacher", CPU, 4, model, data={"buckets": ["4x4x4"]})
    result = wanfw("sample", path, "--dataset", "--out", tmp_path / "pairs", "--count", 4, "--device", "cpu")
    assert result.returncode != 0
    assert "sample_steps 50 at sample_shift 5 passes no step at t = 937.5" in result.stderr, result.stderr


@pytest.mark.parametrize("model, message", [
    ({"causal": {"frames_per_chunk": 0, "training": "ode_pairs"}},
     "model.causal.training: ode_pairs trains a causal student, and causal.frames_per_chunk is 0"),
    ({"causal": {"frames_per_chunk": 2}, "sample_trajectory_steps": LEVELS},
     "model.sample_trajectory_steps: the teacher that records ODE pairs is a bidirectional model"),
])
def test_an_ode_pairs_setting_that_cannot_work_is_refused_naming_the_option(tmp_path, model, message):
    path = experiment(tmp_path, "ode", CPU, 4, {"name": "wan22_flow_matching", "preset": "tiny", **model},
                      data={"buckets": ["4x4x4"]})
    result = wanfw("validate", path, check=2)
    assert message in result.stderr
