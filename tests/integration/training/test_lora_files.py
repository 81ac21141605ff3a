"""LoRA adapter files from elsewhere (model.lora.load): adapters written in Python in the wan and
kohya layouts merge and train further to the same outputs; adapters that do not fit the model, hold
bad values or state no usable alpha are refused before the first step, naming the key, tensor or
field."""

import json

import pytest
import torch
from safetensors.torch import save_file

from harness.lora import LAYERS, base, diffusers_name, inputs, lora_model, predict  # noqa: F401 (a fixture)
from harness.references import TOLERANCE, reference_model
from harness.runs import base_config, wanfw, write_config


def random_adapter(rank=3, seed=11):
    g = torch.Generator().manual_seed(seed)
    return {layer: (torch.randn(rank, 48 if "ffn.2" not in layer else 96, generator=g) * 0.1,
                    torch.randn(96 if "ffn.0" in layer else 48, rank, generator=g) * 0.1) for layer in LAYERS}


def write_layout(path, adapter, layout, alpha=6.0):
    tensors = {}
    for layer, (a, b) in adapter.items():
        if layout == "wan":
            names = (f"diffusion_model.{layer}.lora_A.weight", f"diffusion_model.{layer}.lora_B.weight")
            tensors[f"diffusion_model.{layer}.alpha"] = torch.tensor(alpha)
        else:  # kohya: lora_unet_ names, lora_down / lora_up
            stem = "lora_unet_" + layer.replace(".", "_")
            names = (f"{stem}.lora_down.weight", f"{stem}.lora_up.weight")
            tensors[f"{stem}.alpha"] = torch.tensor(alpha)
        tensors[names[0]], tensors[names[1]] = a.contiguous(), b.contiguous()
    save_file(tensors, path)


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("layout", ["wan", "kohya"])
def test_an_adapter_of_another_layout_written_in_python_merges_and_trains_further_to_the_same_outputs(
        tmp_path, base, layout):
    adapter = random_adapter()
    write_layout(tmp_path / "adapter.safetensors", adapter, layout)
    reference = reference_model(tmp_path / "unused", seed=5)
    modules = dict(reference.model.named_modules())
    with torch.no_grad():  # W += scale * alpha / rank * B A, applied by hand in diffusers' names
        for layer, (a, b) in adapter.items():
            modules[diffusers_name(layer)].weight += 0.5 * (6.0 / 3) * b @ a
    given = inputs()
    with torch.no_grad():
        expected = reference(given["x"], given["t"], given["context"]).sample
    load = [{"file": str(tmp_path / "adapter.safetensors"), "scale": 0.5}]
    merged = write_config(tmp_path / "merged.json", base_config(tmp_path / "runs", model={
        **lora_model(base), "lora": {"rank": 0, "load": load}}))
    assert torch.allclose(predict(tmp_path, merged, given), expected, atol=TOLERANCE, rtol=0)
    further = write_config(tmp_path / "further.json", base_config(tmp_path / "runs", model={
        **lora_model(base), "lora": {"rank": 3, "alpha": 1.5, "load": [{**load[0], "train": True}]}}))
    assert torch.allclose(predict(tmp_path, further, given), expected, atol=TOLERANCE, rtol=0)


def refusal_result(tmp_path, base, tensors, **entry):
    save_file(tensors, tmp_path / "bad.safetensors")
    config = write_config(tmp_path / "bad.json", base_config(tmp_path / "runs", model={
        **lora_model(base), "lora": {"rank": 3, "load": [{"file": str(tmp_path / "bad.safetensors"), **entry}]}}))
    return wanfw("run", config)


def refusal(tmp_path, base, tensors, **entry):
    result = refusal_result(tmp_path, base, tensors, **entry)
    assert result.returncode != 0
    return result.stdout + result.stderr


def test_adapters_that_do_not_fit_the_model_are_refused_naming_the_key(tmp_path, base):
    a, b = torch.zeros(3, 48), torch.zeros(48, 3)
    message = refusal(tmp_path, base, {"diffusion_model.blocks.7.self_attn.q.lora_A.weight": a,
                                       "diffusion_model.blocks.7.self_attn.q.lora_B.weight": b})
    assert "'diffusion_model.blocks.7.self_attn.q.lora_A.weight' matches no adaptable layer" in message
    message = refusal(tmp_path, base, {"diffusion_model.blocks.0.ffn.0.lora_A.weight": a,
                                       "diffusion_model.blocks.0.ffn.0.lora_B.weight": b})
    assert "'diffusion_model.blocks.0.ffn.0.lora_A.weight'" in message and "needs A [rank, 48] and B [96, rank]" in message
    message = refusal(tmp_path, base, {"diffusion_model.blocks.0.self_attn.q.lora_A.weight": torch.zeros(2, 48),
                                       "diffusion_model.blocks.0.self_attn.q.lora_B.weight": torch.zeros(48, 2)},
                      train=True)
    assert "'diffusion_model.blocks.0.self_attn.q.lora_A.weight' has rank 2, but model.lora.rank is 3" in message
    message = refusal(tmp_path, base, {"diffusion_model.blocks.0.self_attn.q.diff": torch.zeros(48, 48)})
    assert "'diffusion_model.blocks.0.self_attn.q.diff' is not part of a low-rank adapter" in message


def test_a_target_pattern_that_selects_no_layer_points_at_the_option(tmp_path, base):
    config = write_config(tmp_path / "t.json", base_config(tmp_path / "runs", model=lora_model(
        base, targets=["blocks.*.self_attn.*", "blocks.*.attn1.*"])))
    result = wanfw("validate", config)
    assert result.returncode != 0
    assert "model.lora.targets: blocks.*.attn1.* selects no layer" in result.stdout + result.stderr


def diffusers_file(path, adapter, metadata=None):
    tensors = {}
    for layer, (a, b) in adapter.items():
        tensors[f"transformer.{diffusers_name(layer)}.lora_A.weight"] = a.contiguous()
        tensors[f"transformer.{diffusers_name(layer)}.lora_B.weight"] = b.contiguous()
    save_file(tensors, path, metadata=None if metadata is None else {"lora_adapter_metadata": json.dumps(metadata)})
    return path


@pytest.mark.parametrize("tamper, words", [
    (lambda a, b: (a.index_put_((torch.tensor(1), torch.tensor(4)), torch.tensor(float("nan"))), b),
     "holds 1 value that is NaN or infinite, the first at [1, 4] = nan"),
    (lambda a, b: (a, b.index_put_((torch.tensor(0), torch.tensor(2)), torch.tensor(float("inf")))),
     "holds 1 value that is NaN or infinite, the first at [0, 2] = inf"),
    (lambda a, b: (a.to(torch.complex64), b), "holds complex values (ComplexFloat)"),
    (lambda a, b: (a.to(torch.int32), b), "holds integers (Int)"),
])
def test_an_adapter_holding_bad_values_is_refused_before_the_first_step_naming_the_tensor(tmp_path, base, tamper,
                                                                                           words):
    a, b = torch.randn(3, 48) * 0.1, torch.randn(48, 3) * 0.1
    a, b = tamper(a, b)
    result = refusal_result(tmp_path, base, {"diffusion_model.blocks.0.self_attn.q.lora_A.weight": a,
                                             "diffusion_model.blocks.0.self_attn.q.lora_B.weight": b})
    assert result.returncode == 1
    assert f"{tmp_path / 'bad.safetensors'}: tensor 'diffusion_model.blocks.0.self_attn.q.lora_" in result.stderr
    assert words in result.stderr and "an adapter matrix" in result.stderr
    assert "step 1/" not in result.stdout and "Casting complex" not in result.stdout + result.stderr


@pytest.mark.parametrize("alpha", [float("inf"), 0.0, -2.0])
def test_an_alpha_tensor_that_is_not_a_positive_finite_number_is_refused(tmp_path, base, alpha):
    adapter = {"diffusion_model.blocks.0.self_attn.q.lora_A.weight": torch.randn(3, 48),
               "diffusion_model.blocks.0.self_attn.q.lora_B.weight": torch.randn(48, 3),
               "diffusion_model.blocks.0.self_attn.q.alpha": torch.tensor(alpha)}
    message = refusal(tmp_path, base, adapter)
    assert "'diffusion_model.blocks.0.self_attn.q.alpha'" in message
    assert ("NaN or infinite" if alpha == float("inf") else f"gives alpha {alpha:g}; alpha must be a positive finite") \
        in message


def test_a_rank_zero_adapter_is_refused(tmp_path, base):
    message = refusal(tmp_path, base, {"diffusion_model.blocks.0.self_attn.q.lora_A.weight": torch.zeros(0, 48),
                                       "diffusion_model.blocks.0.self_attn.q.lora_B.weight": torch.zeros(48, 0)})
    assert "'diffusion_model.blocks.0.self_attn.q.lora_A.weight' has rank 0" in message


def test_a_metadata_alpha_written_as_a_numeric_string_scales_the_update_as_that_number(tmp_path, base):
    adapter = random_adapter()
    given = inputs()
    outputs = {}
    for name, metadata in {"string": {"r": 3, "lora_alpha": "8"}, "number": {"r": 3, "lora_alpha": 8},
                           "absent": None}.items():
        file = diffusers_file(tmp_path / f"{name}.safetensors", adapter, metadata)
        config = write_config(tmp_path / f"{name}.json", base_config(tmp_path / "runs", model={
            **lora_model(base), "lora": {"rank": 0, "load": [{"file": str(file)}]}}))
        outputs[name] = predict(tmp_path, config, given)
    assert torch.equal(outputs["string"], outputs["number"])
    assert not torch.allclose(outputs["string"], outputs["absent"])  # alpha 8 is not alpha = rank


@pytest.mark.parametrize("metadata, words", [
    ({"r": 3, "lora_alpha": "eight"}, "metadata field 'lora_alpha' (in lora_adapter_metadata) is \"eight\", not a number"),
    ({"r": "3.5", "lora_alpha": 8}, "gives the rank 3.5; a rank is a whole number >= 1"),
    ({"r": 3, "lora_alpha": "-inf"}, "gives alpha -inf; alpha must be a positive finite number"),
    ({"r": 5, "lora_alpha": 8}, "has rank 3, but the metadata field 'r' (in lora_adapter_metadata) says 5"),
])
def test_adapter_metadata_that_does_not_state_a_usable_number_is_refused_naming_the_field(tmp_path, base, metadata,
                                                                                           words):
    file = diffusers_file(tmp_path / "meta.safetensors", random_adapter(), metadata)
    config = write_config(tmp_path / "meta.json", base_config(tmp_path / "runs", model={
        **lora_model(base), "lora": {"rank": 0, "load": [{"file": str(file)}]}}))
    result = wanfw("run", config)
    assert result.returncode == 1 and str(file) in result.stderr and words in result.stderr, result.stderr
