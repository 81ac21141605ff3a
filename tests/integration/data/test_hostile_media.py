"""Hostile input to the video features: a Wan VAE's weights, `wanfw decode`'s latents and output,
and the options of previews, the VAE, block swap and the profiler. Each case builds the bad file or
config here and asserts the exit code, the file, tensor or key named, and that nothing was
written. FFmpeg's statistics stay out of the console."""

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.media import LATENT_FRAMES, wan_model
from harness.references import reference_vae
from harness.runs import base_config, wanfw, write_config

WEIGHT = "decoder.conv_in.weight"


@pytest.fixture(scope="module")
def vae(tmp_path_factory):
    """A tiny Wan2.1 VAE folder (config.json and diffusers' weights)."""
    folder = tmp_path_factory.mktemp("vae") / "vae"
    reference_vae(folder, "wan2.1")
    return folder


def first_bad(index, shape):
    """How the tensor gate names element `index` (flat) of a tensor of `shape`: "[0, 0, 0, 2, 1]"."""
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(index, shape)) + "]"


def spoiled(vae, tmp_path, value, layout="folder"):
    """The VAE with one element of WEIGHT replaced by `value` (a float, or a dtype for the whole
    tensor), laid out as a vae/ folder, a pipeline folder holding one, or one safetensors file."""
    state = load_file(vae / "diffusion_pytorch_model.safetensors")
    if isinstance(value, torch.dtype):
        state[WEIGHT] = state[WEIGHT].to(value)
    else:
        state[WEIGHT] = state[WEIGHT].clone()
        state[WEIGHT].view(-1)[7] = value
    folder = tmp_path / ("pipeline/vae" if layout == "pipeline" else "bad_vae")
    folder.mkdir(parents=True)
    save_file(state, folder / "diffusion_pytorch_model.safetensors")
    if layout == "file":
        return folder / "diffusion_pytorch_model.safetensors"  # no config.json beside it: the 2.1 preset
    shutil.copy(vae / "config.json", folder / "config.json")
    return tmp_path / "pipeline" if layout == "pipeline" else folder


def latents_file(tmp_path, tensor, name="latents.safetensors"):
    save_file({"latents": tensor}, tmp_path / name)
    return tmp_path / name


def decode(tmp_path, latents, vae, out):
    return wanfw("decode", latents, "--vae", vae, "--model", "wan22_flow_matching", "--out", out)


def run_config(tmp_path, vae, **sections):
    model = {**wan_model(vae), **sections.pop("model", {})}
    config = base_config(tmp_path / "runs", model=model, data={"num_samples": 4, "batch_size": 2, "workers": 0,
                                                               "buckets": [f"{LATENT_FRAMES}x4x4"]},
                         trainer={"max_steps": 2}, **sections)
    return write_config(tmp_path / "wan.json", config)


@pytest.mark.parametrize("value, words", [(float("nan"), "= nan"), (float("inf"), "= inf")], ids=["nan", "inf"])
def test_a_vae_weight_that_is_not_finite_stops_decode_naming_file_and_tensor_and_writes_nothing(
        tmp_path, vae, value, words):
    bad = spoiled(vae, tmp_path, value)
    result = decode(tmp_path, latents_file(tmp_path, torch.zeros(1, 16, 1, 2, 2)), bad, tmp_path / "frames.safetensors")
    assert result.returncode == 1, result.stderr
    assert str(bad / "diffusion_pytorch_model.safetensors") in result.stderr and WEIGHT in result.stderr
    shape = load_file(vae / "diffusion_pytorch_model.safetensors")[WEIGHT].shape
    assert f"the first at {first_bad(7, shape)} {words}" in result.stderr, result.stderr
    assert not (tmp_path / "frames.safetensors").exists()


def test_a_vae_weight_of_integers_is_refused_naming_the_tensor(tmp_path, vae):
    bad = spoiled(vae, tmp_path, torch.int32)
    result = decode(tmp_path, latents_file(tmp_path, torch.zeros(1, 16, 1, 2, 2)), bad, tmp_path / "out")
    assert result.returncode == 1 and WEIGHT in result.stderr and "holds integers" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("layout", ["folder", "pipeline", "file"])
def test_a_run_whose_vae_holds_a_nan_stops_before_step_1_naming_the_option_and_tensor(tmp_path, vae, layout):
    bad = spoiled(vae, tmp_path, float("nan"), layout)
    result = wanfw("run", run_config(tmp_path, bad))
    assert result.returncode == 2, result.stderr
    assert "model.vae" in result.stderr and WEIGHT in result.stderr and "diffusion_pytorch_model" in result.stderr
    assert "step 1" not in result.stdout and not (tmp_path / "runs").exists()
    # `wanfw validate` reads the headers alone (as for the DiT's weights): the dtypes, not the values.
    assert wanfw("validate", run_config(tmp_path, bad)).returncode == 0


@pytest.mark.parametrize("shape", [(16, 4), (16, 3, 4), (1, 16, 3, 4), (1, 48, 1, 2, 2), (1, 16, 0, 2, 2),
                                   (1, 16, 1, 2, 2, 1)],
                         ids=["2d", "3d", "4d", "48_channels", "no_frames", "6d"])
def test_latents_of_another_shape_are_refused_naming_file_tensor_and_both_shapes_and_nothing_is_written(
        tmp_path, vae, shape):
    latents = latents_file(tmp_path, torch.zeros(shape))
    result = decode(tmp_path, latents, vae, tmp_path / "videos")
    assert result.returncode == 1, result.stderr
    assert f"{latents}: tensor 'latents' has shape [{', '.join(map(str, shape))}]" in result.stderr, result.stderr
    assert "the decoder takes [B, 16, T, h, w]" in result.stderr
    assert "Dimension out of range" not in result.stderr and "decoded" not in result.stdout
    assert not (tmp_path / "videos").exists()


@pytest.mark.parametrize("value", [float("nan"), float("-inf")], ids=["nan", "inf"])
def test_latents_that_are_not_finite_are_refused_naming_the_element(tmp_path, vae, value):
    tensor = torch.zeros(1, 16, 2, 2, 2)
    tensor.view(-1)[33] = value
    result = decode(tmp_path, latents_file(tmp_path, tensor), vae, tmp_path / "frames.safetensors")
    assert result.returncode == 1 and "tensor 'latents'" in result.stderr, result.stderr
    assert f"the first at {first_bad(33, tensor.shape)}" in result.stderr and "latents to decode" in result.stderr
    assert not (tmp_path / "frames.safetensors").exists()


def test_latents_of_integers_are_refused(tmp_path, vae):
    result = decode(tmp_path, latents_file(tmp_path, torch.zeros(1, 16, 1, 2, 2, dtype=torch.int64)), vae,
                    tmp_path / "frames.safetensors")
    assert result.returncode == 1 and "tensor 'latents' holds integers" in result.stderr, result.stderr


def test_latents_that_would_decode_to_more_video_than_memory_holds_are_refused_before_reading(tmp_path, vae):
    # A header that promises [1, 16, 4096, 64, 64] bfloat16 latents over a sparse file of zeros:
    # 512 MiB on paper, 4 KiB on disk; its video would be 3 x 16,381 x 512 x 512 float32 values.
    shape = [1, 16, 4096, 64, 64]
    size = 2 * 16 * 4096 * 64 * 64
    header = json.dumps({"latents": {"dtype": "BF16", "shape": shape, "data_offsets": [0, size]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + size)
    result = decode(tmp_path, path, vae, tmp_path / "videos")
    assert result.returncode == 1, result.stderr
    assert f"{path}: tensor 'latents' of shape [1, 16, 4096, 64, 64] decodes to 16381 frames of 512x512" \
        in result.stderr and "more than this machine's" in result.stderr
    assert not (tmp_path / "videos").exists()


@pytest.mark.parametrize("case", ["below_a_file", "a_folder"])
def test_an_output_that_cannot_be_written_is_named_before_decoding(tmp_path, vae, case):
    (tmp_path / "a_file").write_text("")
    (tmp_path / "a_folder.safetensors").mkdir()
    out = tmp_path / "a_file" / "frames.safetensors" if case == "below_a_file" else tmp_path / "a_folder.safetensors"
    result = decode(tmp_path, latents_file(tmp_path, torch.zeros(1, 16, 1, 2, 2)), vae, out)
    assert result.returncode == 1 and f"--out {out}" in result.stderr, result.stderr
    assert "decoded" not in result.stdout


@pytest.mark.parametrize("sections, key, words", [
    ({"model": {"vae_fps": 1000}}, "model.vae_fps", "a preview plays at 1 to 240"),
    ({"model": {"vae_fps": -1}}, "model.vae_fps", "a preview plays at 1 to 240"),
    ({"model": {"preview_steps": 100000}}, "model.preview_steps", "must lie in [1, 1000]"),
    ({"trainer": {"max_steps": 3, "profile_steps": 1, "profile_from": 5}}, "trainer.profile_from",
     "after the run's last step (3)"),
    ({"validation": {"every": 0, "preview_prompts": "prompts"}}, "validation.preview_prompts",
     "validation.every is 0"),
    ({"validation": {"every": 1, "preview": False, "preview_prompts": "prompts"}}, "validation.preview_prompts",
     "validation.preview is false"),
], ids=["fps_high", "fps_negative", "preview_steps_past_the_schedule", "profile_after_end", "prompts_never_previewed",
        "prompts_with_previews_off"])
def test_an_option_that_makes_no_sense_is_refused_at_load_time_naming_the_key(tmp_path, vae, sections, key, words):
    trainer = sections.pop("trainer", {"max_steps": 2})
    config = json.loads(run_config(tmp_path, vae, **sections).read_text())
    config["trainer"] = {**config["trainer"], **trainer}
    path = write_config(tmp_path / "wan.json", config)
    for command in ("validate", "run"):
        result = wanfw(command, path)
        assert result.returncode == 2 and f"wan.json:" in result.stderr, result.stderr
        assert key in result.stderr and words in result.stderr, result.stderr
        assert "step 1" not in result.stdout and not (tmp_path / "runs").exists()  # no run folder, no output


@pytest.mark.parametrize("ring", [None, 3], ids=["default", "written"])
def test_a_ring_larger_than_the_streamed_blocks_shrinks_to_them_warning_when_written(tmp_path, vae, ring):
    swap = {"blocks": 1, **({"ring": ring} if ring else {})}
    config = run_config(tmp_path, vae, block_swap=swap, model={"gradient_checkpointing": True, "lora": {"rank": 2}})
    result = wanfw("run", config)
    assert result.returncode == 0, result.stderr
    assert "block swap: 1 of 2 blocks stream" in result.stdout and "through 1 device slot(s)" in result.stdout
    warned = "block_swap.ring 3 asks for more device slots than the 1 streamed block(s): 1 slot(s)"
    assert (warned in result.stdout + result.stderr) == (ring is not None), result.stdout + result.stderr
    saved = (tmp_path / "runs" / "exp" / "version_0" / "config.yaml").read_text()
    assert "ring: 1" in saved  # the saved config runs again as it ran, without the warning


def test_more_blocks_to_stream_than_the_model_can_spare_are_refused_naming_the_key(tmp_path, vae):
    config = run_config(tmp_path, vae, block_swap={"blocks": 2, "ring": 1},
                        model={"gradient_checkpointing": True, "lora": {"rank": 2}})
    result = wanfw("run", config)
    assert result.returncode == 2, result.stderr
    assert "block_swap.blocks" in result.stderr and "wan.json:" in result.stderr
    assert "the model declares 2 units (blocks): at most 1 can stream" in result.stderr
    assert "step 1" not in result.stdout


def test_writing_an_mp4_keeps_ffmpegs_statistics_out_of_the_console(tmp_path, vae):
    result = decode(tmp_path, latents_file(tmp_path, torch.zeros(2, 16, LATENT_FRAMES, 4, 4)), vae,
                    tmp_path / "videos")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "videos" / "sample-1.mp4").exists()
    console = result.stdout + result.stderr
    assert "kb/s" not in console and " @ 0x" not in console and "frame I:" not in console, console
