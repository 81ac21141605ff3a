"""First–last-frame video for the i2v models (Wan2.2 I2V-A14B): tools/encode_dataset.py
--image-condition --last-frame encodes the first frame, zero frames and the last frame as diffusers'
Wan I2V pipeline encodes `image` and `last_image`, and `model.last_frame` builds the mask that
pipeline builds (the last pixel frame marked), so the DiT's velocity equals diffusers' on the same
inputs; at 17 frames through the encoder, at 81 (the official FLF2V length) from the mask alone."""
import json
import sys

import pytest
import torch
from safetensors.torch import load_file

from harness.media import TOOL, encode_dataset, tiny_encoders, write_video
from harness.references import TOLERANCE, padded, predict, reference_model, wan_config

av = pytest.importorskip("av")


def diffusers_condition(encoders, first, last, frames):
    """WanImageToVideoPipeline.prepare_latents' conditioning with `last_image`: [1, 4 + C, F', h, w]."""
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanImageToVideoPipeline
    pipe = WanImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=AutoencoderKLWan.from_pretrained(encoders / "vae"),
                                   scheduler=FlowMatchEulerDiscreteScheduler())
    with torch.no_grad():
        _, condition = pipe.prepare_latents(first[None], 1, 4, first.shape[1], first.shape[2], frames, torch.float32,
                                            torch.device("cpu"), torch.Generator().manual_seed(0), None, last[None])
    return condition


def objective_inputs(condition, seed):
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn(condition.shape[0], 4, *condition.shape[2:], generator=g)
    return {"x0": x0, "noise": torch.randn(x0.shape, generator=g), "sigma": torch.tensor([0.6]),
            "context": torch.randn(1, 5, 32, generator=g)}


def diffusers_velocity(reference, inputs, y):
    xt = (1 - inputs["sigma"]) * inputs["x0"] + inputs["sigma"] * inputs["noise"]
    with torch.no_grad():
        return reference.model(torch.cat([xt, y], 1), inputs["sigma"] * 1000, padded(inputs["context"])).sample


def test_an_encoded_first_and_last_frame_condition_the_model_as_diffusers_last_image_does(tmp_path):
    encoders = tiny_encoders(tmp_path / "encoders")
    (tmp_path / "clips").mkdir()
    write_video(tmp_path / "clips" / "clip.mp4", 17, size=(32, 48))
    (tmp_path / "clips" / "clip.txt").write_text("a red ball moves left")
    result = encode_dataset(tmp_path / "clips", tmp_path / "set", "--vae", encoders / "vae", "--text-encoder",
                            encoders / "text_encoder", "--tokenizer", encoders / "tokenizer", "--buckets", "17x32x48",
                            "--text-len", 16, "--dtype", "float32", "--image-condition", "--last-frame")
    assert result.returncode == 0, result.stdout + result.stderr
    sample = json.loads((tmp_path / "set" / "manifest.json").read_text())["samples"][0]
    where = sample["fields"]["image_condition"]
    stored = load_file(tmp_path / "set" / where["shard"])[where["tensor"]]
    # The same fitted frames as the tool's: its first and last, through diffusers' pipeline.
    sys.path.insert(0, str(TOOL.parent))
    from dataset_media import fit, read_frames
    video = fit(read_frames(tmp_path / "clips" / "clip.mp4", 16.0), (17, 32, 48))
    condition = diffusers_condition(encoders, video[:, 0], video[:, -1], 17)
    assert torch.allclose(stored, condition[0, 4:], atol=1e-4, rtol=1e-4), (stored - condition[0, 4:]).abs().max()
    reference = reference_model(tmp_path / "transformer", in_channels=12, out_channels=4)
    inputs = objective_inputs(condition, seed=3)
    config = wan_config(tmp_path, tmp_path / "transformer", task="i2v", in_dim=12, last_frame=True)
    got = predict(tmp_path, config, {**inputs, "image_condition": stored[None]})["v"]
    expected = diffusers_velocity(reference, inputs, condition)
    assert torch.allclose(got, expected, atol=TOLERANCE, rtol=0), (got - expected).abs().max()


def test_at_81_frames_the_mask_marks_the_first_latent_frame_and_the_last_pixel_frame_alone(tmp_path):
    encoders = tiny_encoders(tmp_path / "encoders")
    g = torch.Generator().manual_seed(4)
    first, last = torch.rand(3, 16, 16, generator=g) * 2 - 1, torch.rand(3, 16, 16, generator=g) * 2 - 1
    condition = diffusers_condition(encoders, first, last, 81)
    mask = condition[0, :4]
    assert mask.shape[1] == 21 and mask[:, 0].eq(1).all() and mask[3, 20].eq(1).all()
    assert mask[:3, 20].eq(0).all() and mask[:, 1:20].eq(0).all()
    reference = reference_model(tmp_path / "transformer", in_channels=12, out_channels=4)
    inputs = objective_inputs(condition, seed=5)
    image_condition = condition[:, 4:]
    for last_frame in (True, False):
        (tmp_path / str(last_frame)).mkdir()
        config = wan_config(tmp_path / str(last_frame), tmp_path / "transformer", task="i2v", in_dim=12,
                            last_frame=last_frame)
        got = predict(tmp_path / str(last_frame), config, {**inputs, "image_condition": image_condition})["v"]
        matches = torch.allclose(got, diffusers_velocity(reference, inputs, condition), atol=TOLERANCE, rtol=0)
        assert matches == last_frame  # without last_frame the mask is the first frame's alone
