"""VACE, the Wan DiT's control branch: `wanfw predict` of a VACE model against diffusers'
WanVACETransformer3DModel (fp32, CPU) on diffusers' own tiny configs and one of ours, the
official names loading bit for bit what the diffusers names load, the checks of its inputs, a new
branch on a base model, both VACE-Fun experts, and `wanfw sample` and previews with a control."""
import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.media import probe, wan_model
from harness.references import padded, predict, reference_model, reference_vae, wan_config
from harness.runs import base_config, wanfw, write_config
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


def test_a_new_branch_on_a_base_models_weights_adds_zero_hints_until_it_trains(tmp_path):
    reference_model(tmp_path / "base", seed=7, num_layers=4)  # a base model: no VACE tensors
    section = model_section({**CONFIGS["hints_after_0_1_3_of_5"], "num_layers": 4, "vace_layers": [0, 2]})
    inputs = forward_inputs(CONFIGS["hints_after_0_1_3_of_5"], seed=8)
    refused = wanfw("validate", wan_config(tmp_path, tmp_path / "base", **section))
    assert refused.returncode != 0
    assert "missing (62): vace_blocks.0.self_attn.q.weight" in refused.stderr
    assert "a base model without the VACE branch" in refused.stderr and "vace_branch: new" in refused.stderr
    (tmp_path / "vace").mkdir()
    vace = predict(tmp_path / "vace", wan_config(tmp_path / "vace", tmp_path / "base", vace_branch="new", **section),
                   inputs)["v"]
    (tmp_path / "plain").mkdir()
    base = {k: v for k, v in section.items() if not k.startswith("vace_")}
    plain = predict(tmp_path / "plain", wan_config(tmp_path / "plain", tmp_path / "base", **base),
                    {k: v for k, v in inputs.items() if k != "vace_context"})["v"]
    assert torch.equal(vace, plain)  # after_proj starts at zero, as the official model builds it


def test_both_experts_of_a_vace_fun_model_take_the_samples_on_their_side_of_the_boundary(tmp_path):
    config = CONFIGS["hints_after_0_1_3_of_5"]
    experts = [reference_model(tmp_path / "pipeline" / folder, seed=seed, **config)  # diffusers' A14B layout
               for folder, seed in (("transformer", 12), ("transformer_2", 13))]
    inputs, scales = forward_inputs(config, seed=14), distinct_scales(config)
    inputs["t"] = torch.tensor([950.0, 300.0])  # high noise, then low noise at boundary 875
    got = predict(tmp_path, wan_config(tmp_path, tmp_path / "pipeline", expert="both", boundary=875,
                                       **model_section(config)), {**inputs, "vace_scale": scales})["v"]
    bound = min(tolerance(config, tokens=inputs["x"][0, 0].numel() // 4), 1e-4)
    for sample, expert in enumerate(experts):
        one = {k: v[sample:sample + 1] for k, v in inputs.items()}
        expected = reference_output(expert, one, scales)
        assert torch.allclose(got[sample:sample + 1], expected, atol=bound, rtol=0), sample


def test_sampling_with_a_control_follows_the_guided_euler_loop_and_drops_the_reference_frame(tmp_path):
    # The official sampler around diffusers' VACE model: both guidance passes see the control at
    # the sampling scales, and the reference frame, denoised with the video, leaves at the end.
    config = CONFIGS["hints_after_0_1_3_of_5"]
    reference = reference_model(tmp_path / "transformer", seed=3, **config)
    inputs, scales = forward_inputs(config, seed=9, batch=1), [0.5, 1.0, 1.5]
    g = torch.Generator().manual_seed(10)
    negative = torch.randn(1, 3, 32, generator=g)
    steps, shift, guidance = 3, 5.0, 4.0
    sigmas = [shift * s / (1 + (shift - 1) * s) for s in (1 - i / steps for i in range(steps + 1))]
    x = inputs["x"].clone()
    with torch.no_grad():
        for i in range(steps):
            velocity = [reference.model(x, torch.tensor([sigmas[i] * 1000]), padded(text),
                                        control_hidden_states=inputs["vace_context"],
                                        control_hidden_states_scale=torch.tensor(scales)).sample
                        for text in (inputs["context"], negative)]
            x = x + (sigmas[i + 1] - sigmas[i]) * (velocity[1] + guidance * (velocity[0] - velocity[1]))
    section = {**model_section(config), "sample_steps": steps, "sample_shift": shift, "sample_guidance": guidance,
               "sample_vace_scale": scales}
    save_file({"noise": inputs["x"], "context": inputs["context"], "negative_context": negative,
               "vace_context": inputs["vace_context"].contiguous(), "reference_frames": torch.tensor([1])},
              tmp_path / "cond.safetensors")
    wanfw("sample", wan_config(tmp_path, tmp_path / "transformer", **section), "--inputs", tmp_path / "cond.safetensors",
          "--out", tmp_path / "samples.safetensors", check=0)
    got = load_file(tmp_path / "samples.safetensors")["latents"]
    assert got.shape == (1, 4, 2, 16, 16)  # 3 latent frames less the reference's
    assert torch.allclose(got, x[:, :, 1:], atol=1e-4, rtol=0), (got - x[:, :, 1:]).abs().max()


def test_a_vace_runs_preview_shows_its_control_beside_what_the_model_made(tmp_path):
    reference_vae(tmp_path / "vae", "wan2.1")  # 16 latent channels: the context is 16 + 16 + 64 wide
    model = wan_model(tmp_path / "vae", preset="tiny-vace", vace_in_dim=96)
    config = base_config(tmp_path / "runs", model=model,
                         data={"num_samples": 8, "batch_size": 2, "workers": 0, "buckets": ["3x4x4"]},
                         trainer={"max_steps": 2, "log_every": 1}, validation={"every": 2, "num_samples": 4},
                         checkpoint={"every": 0, "keep_last": 0})
    out = wanfw("run", write_config(tmp_path / "wan.json", config), check=0).stdout
    assert "previews at step 2: 1 sample(s) decoded" in out
    folder = tmp_path / "runs" / "exp" / "version_0" / "previews" / "step-00000002"
    latents = load_file(folder / "sample-0.safetensors")["latents"]
    assert latents.shape == (1, 16, 3, 4, 8)  # what the model made, and the control's latents to its right
    assert not torch.equal(latents[..., :4], latents[..., 4:])
    assert probe(folder / "sample-0.mp4")["width"] == 2 * probe(folder / "sample-0.mp4")["height"]
