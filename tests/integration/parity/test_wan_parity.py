"""The Wan model plugin against the reference: diffusers' WanTransformer3DModel, loaded into wanfw
from `save_pretrained`, must give the same outputs (fp32, CPU, within TOLERANCE), and the
flow-matching loss must equal the formula computed in Python.

TOLERANCE adds the two ways the sides differ. wanfw computes the sinusoidal time embedding in
float64, as the official code does; diffusers computes it in float32, an angle error of up to
1000 u (u = 2^-24) near t = 1000, about 6e-5. And both compute the rest in float32 with other
kernels: the forward's rounding (equivalence.py) for the tiny DiT's 38 reductions of up to 256
terms, 3.5e-5 of the outputs' scale. Random weights are drawn at a realistic scale (outputs of
order 1), where a structural difference would be far larger."""

import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.references import TEXT_LEN, TOLERANCE, padded, predict, reference_model, wan_config
from harness.runs import SOURCE, WANFW, base_config, wanfw, write_config


@pytest.mark.every_vector_unit
def test_t2v_forward_matches_diffusers(tmp_path):
    reference = reference_model(tmp_path / "transformer")
    g = torch.Generator().manual_seed(1)
    x, t, context = torch.randn(2, 4, 3, 8, 6, generator=g), torch.tensor([37.0, 912.0]), torch.randn(2, 7, 32, generator=g)
    with torch.no_grad():
        expected = reference(x, t, context).sample
    got = predict(tmp_path, wan_config(tmp_path, tmp_path / "transformer"), {"x": x, "t": t, "context": context})["v"]
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=TOLERANCE, rtol=0), (got - expected).abs().max()


@pytest.mark.every_vector_unit
def test_a_context_shorter_than_text_len_matches_the_reference_on_the_zero_padded_context(tmp_path):
    reference = reference_model(tmp_path / "transformer")
    g = torch.Generator().manual_seed(12)
    x, t, short = torch.randn(2, 4, 2, 4, 4, generator=g), torch.tensor([200.0, 700.0]), torch.randn(2, 5, 32, generator=g)
    got = predict(tmp_path, wan_config(tmp_path, tmp_path / "transformer"), {"x": x, "t": t, "context": short})["v"]
    with torch.no_grad():
        official = reference.model(x, t, padded(short)).sample
        unpadded = reference.model(x, t, short).sample
    assert torch.allclose(got, official, atol=TOLERANCE, rtol=0), (got - official).abs().max()
    # The padding is not a detail: the zero rows become keys and values after text_embedding.
    assert (got - unpadded).abs().max() > 100 * TOLERANCE


def test_a_context_longer_than_text_len_is_refused_naming_both_lengths(tmp_path):
    reference_model(tmp_path / "transformer")
    inputs = {"x": torch.randn(1, 4, 2, 4, 4), "t": torch.tensor([500.0]), "context": torch.randn(1, TEXT_LEN + 4, 32)}
    save_file(inputs, tmp_path / "in.safetensors")
    result = wanfw("predict", wan_config(tmp_path, tmp_path / "transformer"), "--inputs", tmp_path / "in.safetensors",
                   "--out", tmp_path / "out.safetensors", check=1)
    assert f"the text context has {TEXT_LEN + 4} tokens, more than the model's text_len {TEXT_LEN}" in result.stderr


@pytest.mark.every_vector_unit
def test_ti2v_forward_with_per_token_timesteps_matches_diffusers(tmp_path):
    reference = reference_model(tmp_path / "transformer")
    g = torch.Generator().manual_seed(2)
    x, context = torch.randn(1, 4, 3, 4, 4, generator=g), torch.randn(1, 5, 32, generator=g)
    tokens_per_frame, frames = 4, 3
    t = torch.full((1, frames * tokens_per_frame), 640.0)
    t[:, :tokens_per_frame] = 0.0  # the clean first frame
    with torch.no_grad():
        expected = reference(x, t, context).sample
    got = predict(tmp_path, wan_config(tmp_path, tmp_path / "transformer", task="ti2v"),
                  {"x": x, "t": t, "context": context})["v"]
    assert torch.allclose(got, expected, atol=TOLERANCE, rtol=0), (got - expected).abs().max()


@pytest.mark.every_vector_unit
def test_flow_matching_loss_matches_the_formula(tmp_path):
    reference = reference_model(tmp_path / "transformer")
    g = torch.Generator().manual_seed(3)
    x0, noise = torch.randn(2, 4, 3, 4, 4, generator=g), torch.randn(2, 4, 3, 4, 4, generator=g)
    sigma, context = torch.tensor([0.25, 0.8]), torch.randn(2, 6, 32, generator=g)
    out = predict(tmp_path, wan_config(tmp_path, tmp_path / "transformer"),
                  {"x0": x0, "noise": noise, "sigma": sigma, "context": context})
    s = sigma.view(-1, 1, 1, 1, 1)
    with torch.no_grad():
        v = reference((1 - s) * x0 + s * noise, sigma * 1000, context).sample
    expected = ((v - (noise - x0)) ** 2).mean()
    assert torch.allclose(out["target"], noise - x0)
    assert abs(out["loss"].item() - expected.item()) < TOLERANCE * max(1.0, expected.item())


def test_weights_of_another_shape_are_refused_before_any_compute(tmp_path):
    reference_model(tmp_path / "transformer", num_layers=3)
    config = wan_config(tmp_path, tmp_path / "transformer")
    result = wanfw("validate", config, check=1)
    assert "do not fit the model" in result.stderr
    assert "unexpected (" in result.stderr and "blocks.2." in result.stderr


def test_weights_with_another_width_list_the_shape_mismatches(tmp_path):
    reference_model(tmp_path / "transformer", ffn_dim=64)
    result = wanfw("validate", wan_config(tmp_path, tmp_path / "transformer"), check=1)
    assert "shape mismatch (" in result.stderr and "blocks.0.ffn.0.weight" in result.stderr


def test_a_missing_shard_is_named(tmp_path):
    folder = tmp_path / "sharded"
    reference_model(tmp_path / "transformer").save_pretrained(folder, max_shard_size="20KB")
    shards = sorted(folder.glob("*.safetensors"))
    assert len(shards) > 1
    shards[-1].unlink()
    result = wanfw("validate", wan_config(tmp_path, folder), check=1)
    assert shards[-1].name in result.stderr and "is missing" in result.stderr


def test_sharded_diffusers_weights_load_like_a_single_file(tmp_path):
    reference = reference_model(tmp_path / "transformer")
    reference.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    g = torch.Generator().manual_seed(4)
    inputs = {"x": torch.randn(1, 4, 1, 4, 4, generator=g), "t": torch.tensor([500.0]),
              "context": torch.randn(1, 3, 32, generator=g)}
    single = predict(tmp_path, wan_config(tmp_path, tmp_path / "transformer"), inputs)["v"]
    sharded = predict(tmp_path, wan_config(tmp_path, tmp_path / "sharded"), inputs)["v"]
    assert torch.equal(single, sharded)


def test_dims_that_do_not_divide_are_a_config_error(tmp_path):
    config = write_config(tmp_path / "wan.yaml", base_config(
        tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "num_heads": 5}))
    result = wanfw("validate", config, check=2)
    assert "not divisible by num_heads 5" in result.stderr and "model.preset" in result.stderr


def test_the_tiny_preset_trains_and_its_loss_falls(tmp_path):
    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny"},
                         data={"num_samples": 64, "batch_size": 4}, optimizer={"lr": 3e-3},
                         trainer={"max_steps": 60, "log_every": 10}, checkpoint={"every": 0})
    wanfw("run", write_config(tmp_path / "wan.yaml", config), check=0)
    rows = (tmp_path / "runs" / "exp" / "version_0" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    losses = [float(r.split(",")[header.index("loss")]) for r in rows[1:]]
    assert losses[-1] < losses[0]
    weights = load_file(next((tmp_path / "runs" / "exp" / "version_0" / "checkpoints").iterdir()) / "model.safetensors")
    assert "blocks.1.cross_attn.norm_k.weight" in weights and "head.modulation" in weights


def test_model_info_counts_the_5b_preset_without_allocating_it(tmp_path):
    config = write_config(tmp_path / "wan.yaml", base_config(
        tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "wan2.2-ti2v-5b", "task": "ti2v"}))
    result = subprocess.run(["bash", "-c", 'ulimit -v 4000000 && exec "$0" model-info "$1"', WANFW, config],
                            capture_output=True, text=True, timeout=120)  # 4 GB address space: far below 5B weights
    assert result.returncode == 0, result.stderr
    assert "parameters: 4,999,787,712" in result.stdout


@pytest.mark.every_vector_unit
def test_i2v_forward_with_image_channels_matches_diffusers(tmp_path):
    reference = reference_model(tmp_path / "transformer", in_channels=12, out_channels=4)  # 4 + 4 mask + 4 image
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(1, 4, 2, 4, 4, generator=g), torch.randn(1, 8, 2, 4, 4, generator=g)
    t, context = torch.tensor([300.0]), torch.randn(1, 5, 32, generator=g)
    with torch.no_grad():
        expected = reference(torch.cat([x, y], 1), t, context).sample
    got = predict(tmp_path, wan_config(tmp_path, tmp_path / "transformer", task="i2v", in_dim=12),
                  {"x": x, "y": y, "t": t, "context": context})["v"]
    assert torch.allclose(got, expected, atol=TOLERANCE, rtol=0), (got - expected).abs().max()


@pytest.mark.every_vector_unit
def test_i2v_loss_conditions_on_the_first_frame_mask_and_the_image_condition(tmp_path):
    """The official I2V conditioning: y = [mask (4 channels, 1 on the first latent frame), the VAE
    latents of the image followed by zero frames], concatenated to the noisy latents."""
    reference = reference_model(tmp_path / "transformer", in_channels=12, out_channels=4)
    g = torch.Generator().manual_seed(9)
    x0, noise, condition = (torch.randn(2, 4, 3, 4, 4, generator=g) for _ in range(3))
    sigma, context = torch.tensor([0.3, 0.9]), torch.randn(2, 6, 32, generator=g)
    out = predict(tmp_path, wan_config(tmp_path, tmp_path / "transformer", task="i2v", in_dim=12),
                  {"x0": x0, "noise": noise, "sigma": sigma, "context": context, "image_condition": condition})
    mask = torch.zeros(2, 4, 3, 4, 4)
    mask[:, :, 0] = 1
    s = sigma.view(-1, 1, 1, 1, 1)
    with torch.no_grad():
        v = reference(torch.cat([(1 - s) * x0 + s * noise, mask, condition], 1), sigma * 1000, context).sample
    expected = ((v - (noise - x0)) ** 2).mean()
    assert abs(out["loss"].item() - expected.item()) < TOLERANCE * max(1.0, expected.item())


def test_i2v_trains_on_the_data_sets_image_condition(tmp_path):
    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "task": "i2v",
                                                   "in_dim": 12},
                         data={"num_samples": 16, "batch_size": 2, "buckets": ["2x8x8"]}, trainer={"max_steps": 4})
    result = wanfw("run", write_config(tmp_path / "wan.yaml", config), check=0)
    assert "done: 4 steps" in result.stdout + result.stderr  # every step read batch.at("image_condition")


def test_i2v_with_the_wrong_input_channels_is_a_config_error(tmp_path):
    config = write_config(tmp_path / "wan.yaml", base_config(
        tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "task": "i2v"}))
    result = wanfw("validate", config, check=2)
    assert "feeds the model 12 input channels" in result.stderr and "in_dim is 4" in result.stderr


def test_the_large_model_examples_validate_without_allocating_their_weights():
    for example in ("wan22-ti2v-5b-finetune.yaml", "wan22-t2v-a14b-low-noise-finetune.yaml",
                    "distill-wan22-ti2v-5b-half-depth.yaml", "distill-wan22-a14b-low-noise.yaml",
                    "dmd-wan22-ti2v-5b-shared-base.yaml", "vace-wan21-1.3b-lora.yaml", "vace-wan22-a14b-24gb.yaml"):
        result = subprocess.run(["bash", "-c", 'ulimit -v 6000000 && exec "$0" validate "$1"', WANFW,
                                 SOURCE / "examples" / example], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "without allocating weights" in result.stdout and "is not on this machine" in result.stdout


def test_validate_checks_weight_headers_against_the_preset(tmp_path):
    reference_model(tmp_path / "transformer")
    config = wan_config(tmp_path, tmp_path / "transformer")
    result = wanfw("validate", config, check=0)
    assert "diffusers layout): every tensor present with the model's shape" in result.stdout
