"""Exponential moving averages of the trained parameters (the `ema` section): on the two-expert DMD
generator they are made for, the average follows each step that updated a weight as the decay says,
bit for bit; `wanfw export --ema` and `sample --ema` use the averages in place of the weights; fsdp
writes every average from the rows each rank holds, and they end as one device's."""

import json

import pytest
import torch
from safetensors.torch import load_file

from harness.dmd import EXPERTS, config, expert_adapters_student, sampled, two_experts
from harness.equivalence import U, assert_same_training, checkpoint_file, tiny_wan_rounding
from harness.layouts import CPU, FSDP, GLOBAL_BATCH, LR, TOKENS, run_on, tiny_wan
from harness.launch import torchrun
from harness.runs import checkpoints, run_dir, stop_after, wanfw, write_config

DECAY, START = 0.9, 2


@pytest.fixture
def experts(tmp_path):
    return two_experts(tmp_path / "experts")[0]


def with_ema(path, **ema):
    write_config(path, {**json.loads(path.read_text()), "ema": ema})
    return path


def generator_adapters(weights):
    return [k for k in weights if ".lora_" in k and ".critic_lora_" not in k]


def test_the_generator_average_follows_each_step_that_updated_it_as_the_decay_says(tmp_path, experts):
    """A checkpoint after every step: a generator weight a step changed moves its average to
    0.9 x average + 0.1 x weight (float32, as torch computes it), and is the weight itself up to
    step 2; critic steps, and generator steps that reached no sample of an expert, leave it."""
    path = with_ema(config(tmp_path, experts, steps=7, **EXPERTS), decay=DECAY, start_step=START,
                    groups=["generator"])
    result = wanfw("run", path, check=0)
    assert "ema: decay 0.9 of groups generator (" in result.stdout + result.stderr
    saved = checkpoints(run_dir(tmp_path, "dmd"))
    assert len(saved) == 7
    weights = [load_file(c / "model.safetensors") for c in saved]
    averages = [load_file(c / "optimizer.safetensors") for c in saved]
    names = generator_adapters(weights[0])
    expected = {k: weights[0][k].clone() for k in names}  # step 1: the weights (up to START)
    moved = 0
    for i in range(1, len(saved)):  # step i + 1
        for k in names:
            if not torch.equal(weights[i][k], weights[i - 1][k]):
                if i + 1 <= START:
                    expected[k] = weights[i][k].clone()
                else:
                    expected[k].mul_(DECAY).add_(weights[i][k], alpha=1 - DECAY)
                    moved += 1
            assert torch.equal(averages[i][f"{k}.ema"], expected[k]), (i + 1, k)
    assert moved > 0
    assert {k for k in averages[-1] if k.endswith(".ema")} == {f"{k}.ema" for k in names}  # the critic has none


def test_export_and_sample_with_ema_take_the_averages_in_place_of_the_weights(tmp_path, experts):
    """The exported averages are the checkpoint's, key for key; loaded into wan22_flow_matching they
    sample bit for bit what `wanfw sample --ema` draws from the checkpoint, which is not what the
    trained weights draw."""
    path = with_ema(config(tmp_path, experts, steps=4, sample_size="3x4x4", **EXPERTS), decay=0.5,
                    groups=["generator"])
    wanfw("run", path, check=0)
    run = run_dir(tmp_path, "dmd")
    averages = load_file(checkpoints(run)[-1] / "optimizer.safetensors")
    wanfw("export", path, "--checkpoint", run, "--ema", "--out", tmp_path / "averaged", check=0)
    for expert in ("high_noise", "low_noise"):
        exported = load_file(tmp_path / "averaged" / f"{expert}_model" / "wan_lora.safetensors")
        matrices = [k for k in exported if ".lora_" in k]
        assert matrices
        for k in matrices:
            assert torch.equal(exported[k], averages[k.replace("diffusion_model.", f"generator.{expert}_model.") +
                                                     ".ema"]), k
    drawn = {"averaged": sampled(tmp_path, "averaged", path, "--checkpoint", run, "--ema"),
             "trained": sampled(tmp_path, "trained", path, "--checkpoint", run),
             "exported": sampled(tmp_path, "exported", expert_adapters_student(tmp_path, experts, tmp_path / "averaged"))}
    assert torch.equal(drawn["exported"], drawn["averaged"])
    assert not torch.equal(drawn["averaged"], drawn["trained"])
    refused = wanfw("sample", path, "--ema", "--inputs", tmp_path / "conditioning.safetensors", "--out",
                    tmp_path / "none.safetensors", check=2)
    assert "--ema takes the averages of a training checkpoint" in refused.stderr


def test_fsdp_writes_every_average_from_its_ranks_rows_and_ends_as_one_device(tmp_path):
    """The tiny Wan model, every parameter averaged, on fsdp 2 x 2 and on one device 1 x 4: the
    weights agree to rounding (equivalence.py), and each average, a convex combination of the
    weights of the steps, differs by no more than the largest difference of those weights, plus the
    averaging's own rounding."""
    model = tiny_wan("t2v")
    sections = {"checkpoint": {"every": 1}, "ema": {"decay": 0.5}}
    whole = run_on(tmp_path, "single_1x4", CPU, 4, model, **sections)
    split = run_on(tmp_path, "fsdp_2x2", FSDP, 2, model, 2, **sections)
    assert_same_training(split, whole, lr=LR, tolerance=tiny_wan_rounding(GLOBAL_BATCH, TOKENS))
    folders = {name: checkpoints(tmp_path / "runs" / name / "version_0") for name in ("single_1x4", "fsdp_2x2")}
    averages = {name: {k: v for k, v in checkpoint_file(f[-1], "optimizer").items() if k.endswith(".ema")}
                for name, f in folders.items()}
    assert averages["single_1x4"] and averages["fsdp_2x2"].keys() == averages["single_1x4"].keys()
    history = {name: [checkpoint_file(folder, "model") for folder in f] for name, f in folders.items()}
    for k, average in averages["single_1x4"].items():
        w = k[:-len(".ema")]
        apart = torch.stack([(x[w] - y[w]).abs() for x, y in zip(history["single_1x4"], history["fsdp_2x2"])]).amax(0)
        size = torch.stack([x[w].abs() for x in history["single_1x4"]]).amax(0)
        assert ((averages["fsdp_2x2"][k] - average).abs() <= apart + 8 * U * size).all(), k
    # Stopped after step 3 and resumed on fsdp: each rank reads back the rows of its averages.
    uninterrupted = checkpoint_file(folders["fsdp_2x2"][-1], "optimizer")
    stop_after(run_dir(tmp_path, "fsdp_2x2"), 3)
    resumed = torchrun("run", tmp_path / "fsdp_2x2.json", "--resume", "auto", nproc=2)
    assert resumed.returncode == 0 and "step-00000003" in resumed.stdout, resumed.stdout + resumed.stderr
    again = checkpoint_file(checkpoints(run_dir(tmp_path, "fsdp_2x2"))[-1], "optimizer")
    assert again.keys() == uninterrupted.keys()
    assert all(torch.equal(again[k], uninterrupted[k]) for k in uninterrupted if k.endswith(".ema"))


@pytest.mark.parametrize("ema, command, message", [
    ({"decay": 1.0}, "validate", "ema.decay: must lie in [0, 1): 0 keeps no average"),
    ({"decay": 0.99, "groups": ["generator", "student"]}, "run",
     "ema.groups: 'student' is not a parameter group of the model (its groups: generator, critic)"),
], ids=["decay_of_1", "a_group_the_model_lacks"])
def test_an_ema_section_that_cannot_work_is_refused_naming_the_setting(tmp_path, experts, ema, command, message):
    path = with_ema(config(tmp_path, experts, **EXPERTS), **ema)
    result = wanfw(command, path, check=None)
    assert result.returncode != 0 and message in result.stderr, result.stderr
