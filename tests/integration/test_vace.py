"""VACE, the Wan DiT's control branch: `wanfw predict` of a VACE model against diffusers'
WanVACETransformer3DModel (fp32, CPU) on diffusers' own tiny configs and one of ours, the
official names loading bit for bit what the diffusers names load, the checks of its inputs, and
the branch trained (whole, or through adapters) on data whose control determines the target."""
import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.references import padded, predict, reference_model, wan_config
from harness.runs import wanfw
from harness.vace import CONFIGS, distinct_scales, forward_inputs, model_section, official_name, tolerance


def reference_output(reference, inputs, scales):
    with torch.no_grad():
        return reference.model(inputs["x"], inputs["t"], padded(inputs["context"]),
                               control_hidden_states=inputs["vace_context"],
                               control_hidden_states_scale=scales).sample


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_vace_forward_with_a_reference_frame_and_distinct_scales_matches_diffusers(tmp_path, name):
    config = CONFIGS[name]
    reference = reference_model(tmp_path / "transformer", seed=3, **config)
    inputs, scales = forward_inputs(config, seed=4), distinct_scales(config)
    expected = reference_output(reference, inputs, scales)
    got = predict(tmp_path, wan_config(tmp_path, tmp_path / "transformer", **model_section(config)),
                  {**inputs, "vace_scale": scales})["v"]
    assert got.shape == expected.shape
    # The derived bound, or the 1e-4 where that is tighter (measured: 3e-6 to 8e-6).
    bound = min(tolerance(config, tokens=inputs["x"][0, 0].numel() // 4), 1e-4)
    assert torch.allclose(got, expected, atol=bound, rtol=0), ((got - expected).abs().max(), bound)
    # The hints matter at this scale: without them the output is another one.
    unhinted = reference_output(reference, inputs, torch.zeros_like(scales))
    assert (unhinted - expected).abs().max() > 100 * bound


def test_the_official_names_load_bit_for_bit_what_the_diffusers_names_load(tmp_path):
    config = CONFIGS["hints_after_0_1_3_of_5"]
    reference_model(tmp_path / "transformer", seed=5, **config)
    tensors = load_file(tmp_path / "transformer" / "diffusion_pytorch_model.safetensors")
    official = {official_name(k): v for k, v in tensors.items()}
    assert "vace_blocks.0.before_proj.weight" in official and "vace_blocks.2.after_proj.bias" in official
    (tmp_path / "official").mkdir()
    save_file(official, tmp_path / "official" / "diffusion_pytorch_model.safetensors")
    inputs = {**forward_inputs(config, seed=6), "vace_scale": distinct_scales(config)}
    section = model_section(config)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    from_diffusers = predict(tmp_path / "a", wan_config(tmp_path / "a", tmp_path / "transformer", **section), inputs)
    from_official = predict(tmp_path / "b", wan_config(tmp_path / "b", tmp_path / "official", **section), inputs)
    assert torch.equal(from_diffusers["v"], from_official["v"])


def test_a_vace_context_of_other_frames_than_the_latents_is_refused_naming_both_shapes(tmp_path):
    config = CONFIGS["hints_after_0_1_3_of_5"]
    reference_model(tmp_path / "transformer", seed=5, **config)
    inputs = forward_inputs(config, seed=6)
    inputs["vace_context"] = inputs["vace_context"][:, :, 1:]  # the reference frame left out
    save_file({k: v.contiguous() for k, v in inputs.items()}, tmp_path / "in.safetensors")
    result = wanfw("predict", wan_config(tmp_path, tmp_path / "transformer", **model_section(config)), "--inputs",
                   tmp_path / "in.safetensors", "--out", tmp_path / "out.safetensors")
    assert result.returncode != 0
    assert "the VACE context has shape [2, 72, 2, 16, 16]" in result.stderr, result.stderr
    assert "[2, 4, 3, 16, 16]" in result.stderr and "reference frames prepended" in result.stderr


def test_vace_layers_that_do_not_start_at_block_0_are_a_config_error(tmp_path):
    config = wan_config(tmp_path, "", preset="tiny-vace", vace_layers=[1, 3])
    result = wanfw("validate", config)
    assert result.returncode == 2
    assert "model.vace_layers" in result.stderr and "does not start at block 0" in result.stderr, result.stderr
