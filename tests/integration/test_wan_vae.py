"""The Wan VAEs in C++ (libs/wan_vae) against diffusers' AutoencoderKLWan: decode and encode on
small random configs of both topologies — Wan2.1's (flat down blocks, upsamplers that halve the
width) and Wan2.2's (residual blocks around a 2x2 patchify, averaging and duplicating shortcuts) —
every weight re-drawn so that no path is an identity; 1, 2 and 5 latent frames, odd sizes, batch 2."""

import subprocess

import pytest
import torch
from conftest import BUILD
from diffusers import AutoencoderKLWan
from safetensors.torch import load_file, save_file

TOOL = BUILD / "bin" / "wanfw_vae_tool"
WAN21 = dict(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True])
WAN22 = dict(base_dim=8, decoder_base_dim=16, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
             temperal_downsample=[False, True, True], is_residual=True, in_channels=12, out_channels=12, patch_size=2,
             scale_factor_spatial=16)
VERSIONS = {"wan2.1": (WAN21, 8), "wan2.2": (WAN22, 16)}


def reference_vae(folder, version, seed=0):
    """diffusers' VAE of `version` with every parameter re-drawn (gammas near 1, convolutions scaled
    by their fan-in), saved as a vae/ folder."""
    config, _ = VERSIONS[version]
    g = torch.Generator().manual_seed(seed)
    if version == "wan2.2":  # statistics for its 48 channels
        config = {**config, "latents_mean": (0.3 * torch.randn(48, generator=g)).tolist(),
                  "latents_std": (0.4 + torch.rand(48, generator=g)).tolist()}
    vae = AutoencoderKLWan(**config).eval()
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
    vae.save_pretrained(folder)
    return vae


def run_tool(tmp_path, vae_folder, inputs, *extra):
    save_file({k: v.contiguous() for k, v in inputs.items()}, tmp_path / "in.safetensors")
    result = subprocess.run([str(TOOL), str(vae_folder), str(tmp_path / "in.safetensors"),
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
