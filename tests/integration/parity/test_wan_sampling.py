"""`wanfw sample` against the same sampler written in Python around diffusers'
WanTransformer3DModel: the official flow-matching schedule s_i = shift(linspace(1, 0, steps + 1)),
Euler steps x += (s_{i+1} - s_i) v, and classifier-free guidance v = v_u + g (v_c - v_u). The noise
is given, so both sides start from the same latents; they agree within the forward parity's 1e-4
(measured: 9e-6 on latents of scale 4 after 4 guided steps)."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.references import reference_model
from harness.runs import base_config, checkpoints, wanfw, write_config

STEPS, GUIDANCE, SHIFT = 4, 3.0, 5.0


def schedule(steps, shift):
    s = [1 - i / steps for i in range(steps + 1)]
    return [shift * x / (1 + (shift - 1) * x) for x in s]


def reference_sample(model, noise, context, negative, image=None, y=None):
    sigmas = schedule(STEPS, SHIFT)
    x = noise.clone()
    frame_tokens = (x.shape[3] // 2) * (x.shape[4] // 2)
    with torch.no_grad():
        for i in range(STEPS):
            if image is not None:  # ti2v: the clean first frame, its tokens at t = 0
                x[:, :, 0] = image
                t = torch.full((x.shape[0], x.shape[2] * frame_tokens), sigmas[i] * 1000)
                t[:, :frame_tokens] = 0
            else:
                t = torch.full((x.shape[0],), sigmas[i] * 1000)
            model_input = x if y is None else torch.cat([x, y], 1)  # i2v: the condition's channels
            conditional, unconditional = model(model_input, t, context).sample, model(model_input, t, negative).sample
            x = x + (sigmas[i + 1] - sigmas[i]) * (unconditional + GUIDANCE * (conditional - unconditional))
    if image is not None:
        x[:, :, 0] = image
    return x


def sample_config(tmp_path, weights, **model):
    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "weights": str(weights),
                                                   "sample_steps": STEPS, "sample_guidance": GUIDANCE,
                                                   "sample_shift": SHIFT, "sample_size": "3x8x8", **model})
    return write_config(tmp_path / "wan.yaml", config)


def sample(tmp_path, config, inputs, *extra):
    save_file({k: v.contiguous() for k, v in inputs.items()}, tmp_path / "cond.safetensors")
    wanfw("sample", config, "--inputs", tmp_path / "cond.safetensors", "--out", tmp_path / "samples.safetensors",
          *extra, check=0)
    return load_file(tmp_path / "samples.safetensors")


@pytest.mark.every_vector_unit
def test_euler_sampler_with_guidance_matches_the_python_loop(tmp_path):
    model = reference_model(tmp_path / "transformer")
    g = torch.Generator().manual_seed(8)
    noise, context, negative = (torch.randn(2, 4, 2, 4, 6, generator=g), torch.randn(2, 5, 32, generator=g),
                                torch.randn(2, 3, 32, generator=g))
    got = sample(tmp_path, sample_config(tmp_path, tmp_path / "transformer"),
                 {"noise": noise, "context": context, "negative_context": negative})
    expected = reference_sample(model, noise, context, negative)
    assert torch.allclose(got["sigmas"], torch.tensor(schedule(STEPS, SHIFT), dtype=torch.float64))
    assert torch.allclose(got["latents"], expected, atol=1e-4, rtol=0), (got["latents"] - expected).abs().max()


@pytest.mark.every_vector_unit
def test_ti2v_sampling_keeps_the_image_as_the_first_frame(tmp_path):
    model = reference_model(tmp_path / "transformer")
    g = torch.Generator().manual_seed(9)
    noise, context, image = torch.randn(1, 4, 3, 4, 4, generator=g), torch.randn(1, 5, 32, generator=g), \
        torch.randn(1, 4, 4, 4, generator=g)
    got = sample(tmp_path, sample_config(tmp_path, tmp_path / "transformer", task="ti2v"),
                 {"noise": noise, "context": context, "image": image})["latents"]
    assert torch.equal(got[:, :, 0], image)
    expected = reference_sample(model, noise, context, torch.zeros_like(context), image=image)
    assert torch.allclose(got, expected, atol=1e-4, rtol=0), (got - expected).abs().max()


@pytest.mark.every_vector_unit
def test_i2v_sampling_concatenates_the_mask_and_the_image_condition_at_every_step(tmp_path):
    model = reference_model(tmp_path / "transformer", in_channels=12, out_channels=4)
    g = torch.Generator().manual_seed(10)
    noise, condition = torch.randn(1, 4, 3, 4, 4, generator=g), torch.randn(1, 4, 3, 4, 4, generator=g)
    context = torch.randn(1, 5, 32, generator=g)
    config = sample_config(tmp_path, tmp_path / "transformer", task="i2v", in_dim=12)
    got = sample(tmp_path, config, {"noise": noise, "context": context, "image_condition": condition})["latents"]
    mask = torch.zeros(1, 4, 3, 4, 4)
    mask[:, :, 0] = 1
    expected = reference_sample(model, noise, context, torch.zeros_like(context), y=torch.cat([mask, condition], 1))
    assert torch.allclose(got, expected, atol=1e-4, rtol=0), (got - expected).abs().max()
    save_file({"noise": noise, "context": context}, tmp_path / "no_condition.safetensors")
    result = wanfw("sample", config, "--inputs", tmp_path / "no_condition.safetensors", "--out", tmp_path / "x.st",
                   check=None)
    assert result.returncode != 0 and "the inputs have no tensor 'image_condition'" in result.stderr


def test_the_same_seed_draws_the_same_samples_and_another_seed_others(tmp_path):
    reference_model(tmp_path / "transformer")
    config = sample_config(tmp_path, tmp_path / "transformer")
    context = {"context": torch.randn(1, 5, 32)}
    first = sample(tmp_path, config, context, "--seed", "1")["latents"]
    again = sample(tmp_path, config, context, "--seed", "1")["latents"]
    other = sample(tmp_path, config, context, "--seed", "2")["latents"]
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_sampling_from_a_training_checkpoint_without_inputs(tmp_path):
    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4,
                                                   "sample_steps": 2},
                         data={"num_samples": 16, "batch_size": 4, "workers": 0, "buckets": ["2x4x4"]},
                         trainer={"max_steps": 2, "log_every": 1, "progress": "lines"})
    path = write_config(tmp_path / "wan.yaml", config)
    wanfw("run", path, check=0)
    run_dir = tmp_path / "runs" / "exp" / "version_0"
    result = wanfw("sample", path, "--checkpoint", run_dir, "--count", "3", "--out", tmp_path / "s.safetensors", check=0)
    assert str(checkpoints(run_dir)[-1]) in result.stdout
    latents = load_file(tmp_path / "s.safetensors")["latents"]
    assert latents.shape == (3, 4, 2, 4, 4) and torch.isfinite(latents).all()


def test_sampling_without_a_context_names_the_missing_input(tmp_path):
    reference_model(tmp_path / "transformer")
    save_file({"noise": torch.randn(1, 4, 2, 4, 4)}, tmp_path / "cond.safetensors")
    result = wanfw("sample", sample_config(tmp_path, tmp_path / "transformer"), "--inputs", tmp_path / "cond.safetensors",
                   "--out", tmp_path / "s.safetensors", check=1)
    assert "no tensor 'context'" in result.stderr
