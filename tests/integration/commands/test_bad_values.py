"""Checkpoint files that are well-formed but hold bad values: resuming from one stops before the
first step with exit 1 and an error that names the file, the tensor, what was wrong and what to
do; no LibTorch text reaches the console, and the checkpoint's bytes stay as they were. Trained on
the tiny Wan DiT, whose AdamW moments and generator states are the real ones."""

import hashlib

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.references import reference_model, wan_config
from harness.launch import torchrun
from harness.runs import base_config, checkpoints, wanfw, write_config

FOREIGN_TEXT = ("Exception raised from", "c10::Error", "std::", "Expected a CPUGeneratorImplState",
                "torch.ByteTensor", "Casting complex values")


def folder_digest(folder):
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny Wan run of 2 steps with its checkpoint (weights, AdamW moments and averages); each
    test tampers with a copy."""
    root = tmp_path_factory.mktemp("trained")
    config = base_config(root / "runs", model={"name": "wan22_flow_matching", "preset": "tiny"},
                         data={"num_samples": 16, "batch_size": 2, "workers": 0, "buckets": ["2x4x4"]},
                         trainer={"max_steps": 2, "log_every": 1}, checkpoint={"every": 2, "keep_last": 0},
                         ema={"decay": 0.9})
    path = write_config(root / "wan.yaml", config)
    wanfw("run", path, check=0)
    return root, config


def copy_of_trained(tmp_path, trained):
    """A copy of the trained run set to go on to step 4; returns (its config file, its checkpoint)."""
    import shutil
    source, config = trained
    shutil.copytree(source / "runs", tmp_path / "runs")
    config = {**config, "run": {**config["run"], "output_dir": str(tmp_path / "runs")},
              "trainer": {**config["trainer"], "max_steps": 4}}
    path = write_config(tmp_path / "wan.yaml", config)
    return path, checkpoints(tmp_path / "runs" / config["run"]["name"] / "version_0")[-1]


def resume_with(tmp_path, trained, file, change):
    """Copies the trained run, applies `change` to the tensors of `file` in its checkpoint, and
    resumes it; returns (result, checkpoint, digest before, digest after)."""
    path, checkpoint = copy_of_trained(tmp_path, trained)
    tensors = load_file(checkpoint / file)
    change(tensors)
    save_file(tensors, checkpoint / file, metadata={"format": "pt"})
    before = folder_digest(checkpoint.parent)
    result = wanfw("run", path, "--resume", "auto")
    return result, checkpoint, before, folder_digest(checkpoint.parent)


def assert_refused(result, before, after, *fragments):
    assert result.returncode == 1, result.stdout + result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)
    for text in FOREIGN_TEXT:
        assert text not in result.stdout + result.stderr, text
    assert "step 1/" not in result.stdout and "step 3/" not in result.stdout  # nothing trained
    assert before == after  # the checkpoint folder's bytes, and no new checkpoint


def first_moment_name(tensors, suffix):
    return next(name for name in sorted(tensors) if name.endswith(suffix) and tensors[name].dim() == 2)


@pytest.mark.parametrize("value, words", [(float("nan"), "NaN or infinite"), (float("-inf"), "NaN or infinite")])
def test_an_optimizer_moment_that_is_not_finite_is_refused_naming_it_and_its_first_bad_element(tmp_path, trained,
                                                                                                 value, words):
    names = {}

    def poison(tensors):
        names["moment"] = first_moment_name(tensors, ".exp_avg")
        tensors[names["moment"]][1, 2] = value

    result, checkpoint, before, after = resume_with(tmp_path, trained, "optimizer.safetensors", poison)
    assert_refused(result, before, after, f"{checkpoint / 'optimizer.safetensors'}: tensor '{names['moment']}'",
                   words, "the first at [1, 2]", "an optimizer moment must be finite", "resume from an earlier checkpoint")


def test_a_negative_second_moment_is_refused(tmp_path, trained):
    names = {}

    def poison(tensors):
        names["moment"] = first_moment_name(tensors, ".exp_avg_sq")
        tensors[names["moment"]][0, 3] = -1.0

    result, checkpoint, before, after = resume_with(tmp_path, trained, "optimizer.safetensors", poison)
    assert_refused(result, before, after, f"tensor '{names['moment']}' holds 1 negative value, the first at [0, 3]",
                   "an optimizer second moment is never negative")


def test_a_negative_step_count_is_refused(tmp_path, trained):
    names = {}

    def poison(tensors):
        names["step"] = next(name for name in sorted(tensors) if name.endswith(".step"))
        tensors[names["step"]] = torch.tensor(-3, dtype=torch.int64)

    result, _, before, after = resume_with(tmp_path, trained, "optimizer.safetensors", poison)
    assert_refused(result, before, after, f"tensor '{names['step']}' holds 1 negative value",
                   "an optimizer step count is never negative")


def test_a_weight_holding_nan_is_refused_naming_the_weight(tmp_path, trained):
    def poison(tensors):
        tensors["blocks.0.self_attn.q.weight"][5, 7] = float("nan")

    result, checkpoint, before, after = resume_with(tmp_path, trained, "model.safetensors", poison)
    assert_refused(result, before, after,
                   f"{checkpoint / 'model.safetensors'}: tensor 'blocks.0.self_attn.q.weight' holds 1 value that is "
                   "NaN or infinite, the first at [5, 7] = nan")


@pytest.mark.parametrize("dtype, words", [(torch.complex64, "holds complex values (ComplexFloat)"),
                                          (torch.int32, "holds integers (Int)")])
def test_a_weight_of_a_dtype_a_weight_cannot_have_is_refused(tmp_path, trained, dtype, words):
    def poison(tensors):
        tensors["head.head.weight"] = tensors["head.head.weight"].to(dtype)

    result, _, before, after = resume_with(tmp_path, trained, "model.safetensors", poison)
    assert_refused(result, before, after, f"tensor 'head.head.weight' {words}; a weight holds real floating-point")


@pytest.mark.parametrize("state, words", [
    (torch.zeros(100, dtype=torch.uint8), "has shape [100]; a generator state here has shape [5056]"),
    (torch.zeros(5056, dtype=torch.float32), "holds floating-point values (Float); a generator state holds bytes (U8)"),
])
def test_a_generator_state_of_the_wrong_size_or_dtype_is_refused_in_our_words(tmp_path, trained, state, words):
    def poison(tensors):
        tensors["cpu"] = state

    result, checkpoint, before, after = resume_with(tmp_path, trained, "rng.safetensors", poison)
    assert_refused(result, before, after, f"{checkpoint / 'rng.safetensors'}: tensor 'cpu' {words}")


def reshaped(tensors, suffix):
    """The first matrix ending in `suffix` flattened to one dimension; returns its name."""
    name = first_moment_name(tensors, suffix)
    tensors[name] = tensors[name].reshape(-1).contiguous()
    return name


@pytest.mark.parametrize("suffix", [".exp_avg", ".ema"])
def test_a_moment_or_average_of_another_shape_is_refused_naming_the_optimizer_file(tmp_path, trained, suffix):
    names = {}
    result, checkpoint, before, after = resume_with(
        tmp_path, trained, "optimizer.safetensors", lambda tensors: names.update(name=reshaped(tensors, suffix)))
    shape = list(load_file(checkpoint / "model.safetensors")[names["name"][: -len(suffix)]].shape)
    assert_refused(result, before, after, f"{checkpoint / 'optimizer.safetensors'}: tensor '{names['name']}' has "
                   f"shape [{shape[0] * shape[1]}]; the model's parameter is [{shape[0]}, {shape[1]}]",
                   "resume or evaluate it with the config that wrote it")


def test_a_step_count_of_several_elements_is_refused_naming_the_optimizer_file(tmp_path, trained):
    names = {}

    def poison(tensors):
        names["step"] = next(name for name in sorted(tensors) if name.endswith(".step"))
        tensors[names["step"]] = torch.tensor([2, 2], dtype=torch.int64)

    result, checkpoint, before, after = resume_with(tmp_path, trained, "optimizer.safetensors", poison)
    assert_refused(result, before, after, f"{checkpoint / 'optimizer.safetensors'}: optimizer state "
                   f"'{names['step']}' has shape [2], not one integer")


def test_export_with_ema_refuses_an_average_of_another_shape_naming_the_file_and_writes_nothing(tmp_path, trained):
    path, checkpoint = copy_of_trained(tmp_path, trained)
    tensors = load_file(checkpoint / "optimizer.safetensors")
    name = reshaped(tensors, ".ema")
    save_file(tensors, checkpoint / "optimizer.safetensors", metadata={"format": "pt"})
    result = wanfw("export", path, "--checkpoint", checkpoint, "--ema", "--out", tmp_path / "export")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{checkpoint / 'optimizer.safetensors'}: tensor '{name}' has shape" in result.stderr, result.stderr
    assert not (tmp_path / "export").exists()


def test_fsdp_resuming_a_whole_checkpoint_refuses_a_moment_of_another_shape_naming_the_file(tmp_path, trained):
    # The sharded strategy's reader of the optimizer file, on two ranks: the same refusal.
    path, checkpoint = copy_of_trained(tmp_path, trained)
    tensors = load_file(checkpoint / "optimizer.safetensors")
    name = reshaped(tensors, ".exp_avg_sq")
    save_file(tensors, checkpoint / "optimizer.safetensors", metadata={"format": "pt"})
    before = folder_digest(checkpoint.parent)
    result = torchrun("run", path, "--resume", "auto", "--set", "strategy={name: fsdp, timeout_s: 60}")
    assert result.returncode != 0
    assert f"{checkpoint / 'optimizer.safetensors'}: tensor '{name}' has shape" in result.stdout + result.stderr
    assert before == folder_digest(checkpoint.parent)


# --- files a run reads at start: weights, side tensors, inputs -------------------------------------

def test_model_weights_holding_nan_are_refused_naming_the_shard_and_the_tensor(tmp_path):
    reference_model(tmp_path / "weights", seed=2)
    shard = next((tmp_path / "weights").glob("*.safetensors"))
    tensors = load_file(shard)
    name = next(n for n in sorted(tensors) if n.endswith("attn1.to_q.weight"))
    tensors[name][3, 1] = float("inf")
    save_file(tensors, shard, metadata={"format": "pt"})
    result = wanfw("run", wan_config(tmp_path, tmp_path / "weights"))
    assert result.returncode == 1
    assert f"{shard}: tensor '{name}' holds 1 value that is NaN or infinite, the first at [3, 1] = inf; a weight " \
           "must be finite" in result.stderr, result.stderr
    assert "step 1/" not in result.stdout


def test_a_negative_prompt_holding_nan_is_refused_at_its_option_naming_the_file(tmp_path):
    reference_model(tmp_path / "teacher", seed=3)
    context = torch.randn(5, 32)
    context[2, 7] = float("nan")
    save_file({"negative": context}, tmp_path / "negative.safetensors")
    config = base_config(tmp_path / "runs", model={
        "name": "wan22_distill", "teacher_preset": "tiny", "teacher_weights": str(tmp_path / "teacher"),
        "guidance_scale": 5.0, "negative_context": str(tmp_path / "negative.safetensors")},
        data={"num_samples": 8, "batch_size": 2, "workers": 0, "buckets": ["2x4x4"]})
    result = wanfw("run", write_config(tmp_path / "distill.yaml", config))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "model.negative_context" in result.stderr
    assert f"{tmp_path / 'negative.safetensors'}: tensor 'negative' holds 1 value that is NaN or infinite, the first " \
           "at [2, 7] = nan; a negative prompt's text embedding must be finite" in result.stderr


def test_predict_inputs_holding_infinity_or_complex_values_are_refused_naming_the_tensor(tmp_path):
    config = write_config(tmp_path / "wan.yaml", base_config(tmp_path / "runs", model={
        "name": "wan22_flow_matching", "preset": "tiny"}))
    x = torch.randn(1, 4, 2, 4, 4)
    x[0, 1, 0, 2, 3] = float("-inf")
    save_file({"x": x, "t": torch.tensor([300.0]), "context": torch.randn(1, 5, 32)}, tmp_path / "in.safetensors")
    result = wanfw("predict", config, "--inputs", tmp_path / "in.safetensors", "--out", tmp_path / "out.safetensors")
    assert result.returncode == 1
    assert f"{tmp_path / 'in.safetensors'}: tensor 'x' holds 1 value that is NaN or infinite, the first at " \
           "[0, 1, 0, 2, 3] = -inf; an input must be finite" in result.stderr
    save_file({"x": torch.randn(1, 4, 2, 4, 4).to(torch.complex64), "t": torch.tensor([300.0]),
               "context": torch.randn(1, 5, 32)}, tmp_path / "in.safetensors")
    result = wanfw("predict", config, "--inputs", tmp_path / "in.safetensors", "--out", tmp_path / "out.safetensors")
    assert result.returncode == 1 and "tensor 'x' holds complex values (ComplexFloat)" in result.stderr
    assert not (tmp_path / "out.safetensors").exists()


@pytest.mark.parametrize("scaler, words", [
    ({"scale": 65536.0, "growth_tracker": -4}, "the loss scaler's growth_tracker is -4; it counts steps and is never "
                                               "negative"),
    ({"scale": -1.0, "growth_tracker": 0}, "the loss scale is -1, not a positive finite number"),
])
def test_a_loss_scaler_state_out_of_range_is_refused_naming_the_field(tmp_path, trained, scaler, words):
    import json
    path, checkpoint = copy_of_trained(tmp_path, trained)
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    state["loss_scaler"] = scaler
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    before = folder_digest(checkpoint.parent)
    result = wanfw("run", path, "--resume", "auto")
    assert_refused(result, before, folder_digest(checkpoint.parent), f"{checkpoint / 'trainer_state.json'}: {words}")
