"""The Wan VAEs in C++ (libs/wan_vae) against diffusers' AutoencoderKLWan: decode and encode on
small random configs of both topologies — Wan2.1's (flat down blocks, upsamplers that halve the
width) and Wan2.2's (residual blocks around a 2x2 patchify, averaging and duplicating shortcuts) —
every weight re-drawn so that no path is an identity; 1, 2 and 5 latent frames, odd sizes, batch 2."""

import subprocess

import pytest
import torch
from diffusers import AutoencoderKLWan
from safetensors.torch import load_file, save_file

from harness.launch import TEST_TOOLS
from harness.references import VERSIONS, WAN21, reference_vae
from harness.runs import base_config, wanfw, write_config

TOOL = [TEST_TOOLS, "vae"]


def run_tool(tmp_path, vae_folder, inputs, *extra):
    save_file({k: v.contiguous() for k, v in inputs.items()}, tmp_path / "in.safetensors")
    result = subprocess.run([*TOOL, str(vae_folder), str(tmp_path / "in.safetensors"),
                             str(tmp_path / "out.safetensors"), *extra], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return load_file(tmp_path / "out.safetensors")


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("version", ["wan2.1", "wan2.2"])
def test_decode_gives_diffusers_frames_for_one_two_and_five_latent_frames(tmp_path, version):
    vae = reference_vae(tmp_path / "vae", version)
    z, scale = vae.config.z_dim, VERSIONS[version][1]
    g = torch.Generator().manual_seed(1)
    for frames, (h, w) in ((1, (3, 5)), (2, (4, 4)), (5, (5, 3))):
        latents = torch.randn(2, z, frames, h, w, generator=g)
        with torch.no_grad():
            expected = vae.decode(latents).sample
        assert (expected.abs() < 1).float().mean() > 0.8  # the frames are not the clamp's +-1
        video = run_tool(tmp_path, tmp_path / "vae", {"latents": latents})["video"]
        assert video.shape == (2, 3, 1 + 4 * (frames - 1), h * scale, w * scale)
        # The same ATen kernels in the same order: equal here; 1e-4 is the bound other CPUs must keep.
        error = (video - expected).abs().max().item()
        print(f"{version} decode T={frames} {h}x{w}: max |diff| {error:.2e}")
        assert error <= 1e-4


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("version", ["wan2.1", "wan2.2"])
def test_encode_gives_diffusers_mean_and_log_variance(tmp_path, version):
    vae = reference_vae(tmp_path / "vae", version)
    scale = VERSIONS[version][1]
    g = torch.Generator().manual_seed(2)
    for frames, latent_frames in ((1, 1), (5, 2), (6, 2), (9, 3)):  # 6: the frame past 1 + 4k is dropped
        video = torch.rand(2, 3, frames, 2 * scale, 3 * scale, generator=g) * 2 - 1
        with torch.no_grad():
            dist = vae.encode(video).latent_dist
        out = run_tool(tmp_path, tmp_path / "vae", {"video": video})
        assert out["mean"].shape == (2, vae.config.z_dim, latent_frames, 2, 3)
        for name, expected in (("mean", dist.mean), ("logvar", dist.logvar)):
            error = (out[name] - expected).abs().max().item()
            print(f"{version} encode F={frames} {name}: max |diff| {error:.2e}")
            assert error <= 1e-4


def test_the_model_latents_are_unnormalised_with_the_configs_mean_and_std(tmp_path):
    vae = reference_vae(tmp_path / "vae", "wan2.2")
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    normalised = torch.randn(1, 48, 2, 3, 3, generator=torch.Generator().manual_seed(3))
    out = run_tool(tmp_path, tmp_path / "vae", {"normalised": normalised, "latents": normalised * std + mean})
    assert torch.equal(out["video_from_normalised"], out["video"])


RESNET_LEAF = {"norm1": "residual.0", "conv1": "residual.2", "norm2": "residual.3", "conv2": "residual.6",
               "conv_shortcut": "shortcut"}


def official_name(name, residual, blocks=2):
    """diffusers' name -> the official checkpoints' (wan/modules/vae2_1.py, vae2_2.py)."""
    parts = name.split(".")
    if parts[0] in ("quant_conv", "post_quant_conv"):
        return ".".join(["conv1" if parts[0] == "quant_conv" else "conv2"] + parts[1:])
    side, rest = parts[0], parts[1:]
    if rest[0] == "conv_in":
        return ".".join([side, "conv1"] + rest[1:])
    if rest[0] == "norm_out":
        return ".".join([side, "head.0"] + rest[1:])
    if rest[0] == "conv_out":
        return ".".join([side, "head.2"] + rest[1:])
    if rest[0] == "mid_block":
        kind, index, leaf = rest[1], int(rest[2]), rest[3:]
        position = 1 if kind == "attentions" else 2 * index
        return ".".join([side, "middle", str(position)] + (resnet_leaf(leaf) if kind == "resnets" else leaf))
    stage = int(rest[1])
    if side == "encoder" and not residual:  # a flat list: resnets and resamples alike
        return ".".join(["encoder.downsamples", str(stage)] + resnet_leaf(rest[2:]))
    if side == "encoder":
        if rest[2] == "resnets":
            return ".".join(["encoder.downsamples", str(stage), "downsamples", rest[3]] + resnet_leaf(rest[4:]))
        return ".".join(["encoder.downsamples", str(stage), "downsamples", str(blocks)] + rest[3:])
    if not residual:  # decoder stages of blocks + 1 resnets and an upsampler, flattened
        index = stage * (blocks + 2) + (int(rest[3]) if rest[2] == "resnets" else blocks + 1)
        leaf = resnet_leaf(rest[4:]) if rest[2] == "resnets" else rest[4:]
        return ".".join(["decoder.upsamples", str(index)] + leaf)
    if rest[2] == "resnets":
        return ".".join(["decoder.upsamples", str(stage), "upsamples", rest[3]] + resnet_leaf(rest[4:]))
    return ".".join(["decoder.upsamples", str(stage), "upsamples", str(blocks + 1)] + rest[3:])


def resnet_leaf(leaf):
    return RESNET_LEAF.get(leaf[0], leaf[0]).split(".") + leaf[1:] if leaf else leaf


def test_the_official_names_of_wan21_are_what_diffusers_converts_from():
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers
    state = AutoencoderKLWan(**WAN21).state_dict()
    official = {official_name(k, residual=False): v for k, v in state.items()}
    assert len(official) == len(state)
    assert set(convert_wan_vae_to_diffusers(official)) == set(state)


@pytest.mark.parametrize("version", ["wan2.1", "wan2.2"])
def test_weights_under_the_official_names_decode_as_under_diffusers_names(tmp_path, version):
    reference_vae(tmp_path / "vae", version)
    state = load_file(tmp_path / "vae" / "diffusion_pytorch_model.safetensors")
    official = tmp_path / "official"
    official.mkdir()
    (official / "config.json").write_text((tmp_path / "vae" / "config.json").read_text())
    save_file({official_name(k, residual=version == "wan2.2"): v for k, v in state.items()},
              official / "wan_vae.safetensors")
    latents = torch.randn(1, 16 if version == "wan2.1" else 48, 2, 3, 3, generator=torch.Generator().manual_seed(4))
    expected = run_tool(tmp_path, tmp_path / "vae", {"latents": latents})["video"]
    assert torch.equal(run_tool(tmp_path, official, {"latents": latents})["video"], expected)


def tool_error(tmp_path, vae):
    save_file({"latents": torch.zeros(1, 16, 1, 2, 2)}, tmp_path / "in.safetensors")
    result = subprocess.run([*TOOL, str(vae), str(tmp_path / "in.safetensors"), str(tmp_path / "out.safetensors")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    return result.stderr


def test_weights_that_are_not_the_configs_vae_are_refused_naming_the_tensor(tmp_path):
    reference_vae(tmp_path / "vae", "wan2.1")
    weights = tmp_path / "vae" / "diffusion_pytorch_model.safetensors"
    state = load_file(weights)
    missing = dict(state)
    del missing["decoder.up_blocks.1.upsamplers.0.time_conv.weight"]
    save_file(missing, weights)
    assert "parameter decoder.up_blocks.1.upsamplers.0.time_conv.weight is missing" in tool_error(tmp_path, tmp_path / "vae")
    save_file({**state, "decoder.conv_in.weight": state["decoder.conv_in.weight"][:5]}, weights)
    assert "decoder.conv_in.weight has shape 5x16x3x3x3" in tool_error(tmp_path, tmp_path / "vae")
    save_file({**state, "decoder.extra.weight": torch.zeros(1)}, weights)
    assert "tensor decoder.extra.weight is no parameter of the" in tool_error(tmp_path, tmp_path / "vae")
    pickle = tmp_path / "Wan2.1_VAE.pth"
    torch.save(state, pickle)
    message = tool_error(tmp_path, pickle)
    assert "a PyTorch pickle" in message and "st.save_file" in message


@pytest.mark.parametrize("change, words", [
    ({"z_dim": 100000}, "z_dim must be 1 to 1024, not 100000"),
    ({"dim_mult": [1, 2.5, 4, 4]}, "'dim_mult' is"),  # an integer field takes integers alone
    ({"base_dim": 1e48}, "'base_dim' is"),
    ({"scale_factor_spatial": 16}, "4 blocks and patch_size 1 give 8 pixels a latent, scale_factor_spatial says 16"),
    ({"latents_std": [1.0] * 15 + [0.0]}, "latent channel 15: mean -0.2921 and std 0 must be finite, the std positive"),
    ({"dim_mult": [1, 2, 4, 4, 4, 4, 4, 4, 4], "temperal_downsample": [False] * 8}, "9 dim_mult entries (2 to 8)"),
])
def test_a_config_whose_dimensions_do_not_fit_is_refused_saying_which(tmp_path, change, words):
    import json
    reference_vae(tmp_path / "vae", "wan2.1")
    config = json.loads((tmp_path / "vae" / "config.json").read_text())
    (tmp_path / "vae" / "config.json").write_text(json.dumps({**config, **change}))
    assert words in tool_error(tmp_path, tmp_path / "vae")


def decode_config(tmp_path, **model):
    model = {"name": "wan22_flow_matching", "preset": "tiny", **model}
    return write_config(tmp_path / "decode.json", base_config(tmp_path / "runs", model=model))


def test_wanfw_decode_turns_sampled_latents_into_the_video_diffusers_decodes(tmp_path):
    # The model's latents are normalised: the decoder un-normalises them with the VAE's statistics
    # (as the Wan pipelines do: latents / (1 / std) + mean) before decoding.
    vae = reference_vae(tmp_path / "vae", "wan2.1")
    latents = torch.randn(2, 16, 3, 4, 5, generator=torch.Generator().manual_seed(5))
    save_file({"latents": latents}, tmp_path / "latents.safetensors")
    result = wanfw("decode", decode_config(tmp_path), "--inputs", tmp_path / "latents.safetensors", "--out",
                   tmp_path / "video.safetensors", "--vae", tmp_path / "vae", check=0)
    assert "decoded 2 sample(s) of 3 latent frames to 9 frames of 32x40" in result.stdout
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    with torch.no_grad():
        expected = vae.decode(latents / inv_std + mean).sample
    video = load_file(tmp_path / "video.safetensors")["video"]
    assert video.shape == expected.shape == (2, 3, 9, 32, 40)
    # x * std against x / (1 / std): an ulp of the latents apart, well inside 1e-4 after decoding.
    assert (video - expected).abs().max().item() <= 1e-4


def test_wanfw_decode_without_a_vae_is_refused_naming_the_option(tmp_path):
    save_file({"latents": torch.zeros(1, 16, 1, 2, 2)}, tmp_path / "latents.safetensors")
    result = wanfw("decode", decode_config(tmp_path), "--inputs", tmp_path / "latents.safetensors", "--out",
                   tmp_path / "video.safetensors")
    assert result.returncode == 2
    assert "model.vae" in result.stderr and "built no decoder" in result.stderr
