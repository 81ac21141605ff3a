"""Previews as video. A tiny Wan run with model.vae logs each preview sample to TensorBoard as an
animated GIF and a strip of frames (read back with TensorBoard's own reader and PIL) and writes
previews/step-N/sample-I.mp4 (read back with ffprobe and PyAV) beside its latents; the frames are
those latents decoded by diffusers' AutoencoderKLWan, within what each format loses. `wanfw decode`
(without a config) and `wanfw sample --video` write the same kind of file."""

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageSequence
from safetensors.torch import load_file, save_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from harness.media import (FPS, FRAMES, GIF_LUMA_BOUND, LATENT_FRAMES, SIZE, assert_close, expected_frames,
                           mp4_frames, probe, wan_model)
from harness.references import reference_vae
from harness.runs import base_config, wanfw, write_config


@pytest.fixture(scope="module")
def preview_runs():
    return {}  # vector unit: the run's (vae, run folder, events, stdout)


@pytest.fixture
def preview_run(preview_runs, vector_unit, tmp_path_factory):
    """The run the tests read, made once a vector unit (its previews decoded with that unit's kernels)."""
    if vector_unit not in preview_runs:
        preview_runs[vector_unit] = preview(tmp_path_factory.mktemp(f"preview-{vector_unit}"))
    return preview_runs[vector_unit]


def preview(tmp):
    vae = reference_vae(tmp / "vae", "wan2.1")
    config = base_config(tmp / "runs", model=wan_model(tmp / "vae"),
                         data={"num_samples": 16, "batch_size": 2, "workers": 0,
                               "buckets": [f"{LATENT_FRAMES}x4x4"]},
                         trainer={"max_steps": 2, "log_every": 1, "progress": "lines"},
                         validation={"every": 2, "num_samples": 4, "preview_samples": 2},
                         checkpoint={"every": 0, "keep_last": 0},
                         loggers=[{"name": "csv"}, {"name": "tensorboard", "flush_every": 1}])
    result = wanfw("run", write_config(tmp / "wan.json", config), check=0)
    run_dir = tmp / "runs" / "exp" / "version_0"
    accumulator = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    accumulator.Reload()
    return vae, run_dir, accumulator, result.stdout


def preview_latents(run_dir, sample):
    return load_file(run_dir / "previews" / "step-00000002" / f"sample-{sample}.safetensors")["latents"]


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("sample", [0, 1])
def test_each_preview_sample_is_an_animated_gif_of_its_decoded_frames_in_tensorboard(preview_run, sample):
    vae, run_dir, tb, _ = preview_run
    images = tb.Images(f"preview/sample-{sample}")
    assert [i.step for i in images] == [2]
    gif = images[0].encoded_image_string
    assert gif[:6] == b"GIF89a" and (images[0].width, images[0].height) == (SIZE, SIZE)
    with Image.open(io.BytesIO(gif)) as image:
        assert image.n_frames == FRAMES and image.size == (SIZE, SIZE)
        assert image.info["duration"] == 60 and image.info["loop"] == 0  # 6 hundredths: GIF's nearest to 16 fps
        frames = np.stack([np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(image)])
    assert_close(frames, expected_frames(vae, preview_latents(run_dir, sample))[0], f"GIF sample {sample}",
                 GIF_LUMA_BOUND)


@pytest.mark.every_vector_unit
def test_the_preview_strip_is_eight_evenly_spaced_decoded_frames(preview_run):
    vae, run_dir, tb, _ = preview_run
    strip = tb.Images("preview/sample-0/frames")[0]
    assert strip.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(strip.encoded_image_string)) as image:
        pixels = np.asarray(image.convert("RGB"))
    expected = expected_frames(vae, preview_latents(run_dir, 0))[0]
    chosen = [0, 1, 2, 3, 5, 6, 7, 8]  # round(i * 8 / 7): first and last included
    assert pixels.shape == (SIZE, 8 * SIZE, 3)
    # Lossless PNG of the C++ decode, which equals diffusers' within 1e-4 before rounding: 1 level.
    assert np.abs(pixels.astype(int) - np.concatenate(expected[chosen], axis=1).astype(int)).max() <= 1


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("sample", [0, 1])
def test_each_preview_sample_is_an_mp4_of_its_decoded_frames_at_the_vaes_fps(preview_run, sample):
    vae, run_dir, _, stdout = preview_run
    path = run_dir / "previews" / "step-00000002" / f"sample-{sample}.mp4"
    stream = probe(path)
    assert (stream["codec_name"], stream["width"], stream["height"], stream["pix_fmt"]) == ("h264", SIZE, SIZE,
                                                                                          "yuv420p")
    assert int(stream["nb_read_frames"]) == FRAMES and stream["r_frame_rate"] == f"{FPS}/1"
    assert_close(mp4_frames(path), expected_frames(vae, preview_latents(run_dir, sample))[0], f"mp4 sample {sample}")
    assert "previews at step 2: 2 sample(s) decoded in" in stdout


@pytest.mark.every_vector_unit
def test_wanfw_decode_writes_an_mp4_a_sample_without_a_config(tmp_path):
    vae = reference_vae(tmp_path / "vae", "wan2.1")
    latents = torch.randn(2, 16, LATENT_FRAMES, 4, 5, generator=torch.Generator().manual_seed(3))
    save_file({"latents": latents}, tmp_path / "latents.safetensors")
    wanfw("decode", tmp_path / "latents.safetensors", "--vae", tmp_path / "vae", "--model", "wan22_flow_matching",
          "--out", tmp_path / "videos", check=0)
    expected = expected_frames(vae, latents)
    for i in range(2):
        stream = probe(tmp_path / "videos" / f"sample-{i}.mp4")
        assert (stream["width"], stream["height"], int(stream["nb_read_frames"])) == (40, SIZE, FRAMES)
        assert_close(mp4_frames(tmp_path / "videos" / f"sample-{i}.mp4"), expected[i], f"decoded sample {i}")


@pytest.mark.every_vector_unit
def test_wanfw_sample_video_decodes_what_it_samples_and_records_the_model_for_decode(tmp_path):
    reference_vae(tmp_path / "vae", "wan2.1")
    config = write_config(tmp_path / "wan.json", base_config(
        tmp_path / "runs", model=wan_model(tmp_path / "vae"),
        data={"num_samples": 4, "batch_size": 2, "workers": 0, "buckets": [f"{LATENT_FRAMES}x4x4"]}))
    wanfw("sample", config, "--out", tmp_path / "s.safetensors", "--count", "2", "--video", tmp_path / "s.mp4",
          check=0)
    for i in range(2):
        assert int(probe(tmp_path / f"s-{i}.mp4")["nb_read_frames"]) == FRAMES
    # The latents name their model: `wanfw decode` needs no --model and writes the same videos.
    wanfw("decode", tmp_path / "s.safetensors", "--vae", tmp_path / "vae", "--out", tmp_path / "again", check=0)
    for i in range(2):
        assert np.array_equal(mp4_frames(tmp_path / f"s-{i}.mp4"), mp4_frames(tmp_path / "again" / f"sample-{i}.mp4"))


@pytest.mark.parametrize("task, frames, causal, streamed", [
    # 4 latent frames in chunks of 2: frames 0-4 (the first latent frame makes 1), then 5-12.
    ("t2v", 4, {"frames_per_chunk": 2}, ["0-4", "5-12"]),
    # i2v from a first frame: the image alone (pixel frame 0), then 2 chunks of 2 latent frames.
    ("ti2v", 5, {"frames_per_chunk": 2, "independent_first_frame": True}, ["0-0", "1-8", "9-16"]),
])
def test_a_causal_students_sample_video_streams_each_chunks_frames_into_the_mp4_decode_writes(tmp_path, task, frames,
                                                                                            causal, streamed):
    # Each chunk decoded through the VAE's causal cache and appended to a fragmented mp4 as it is made.
    reference_vae(tmp_path / "vae", "wan2.1")
    config = write_config(tmp_path / "wan.json", base_config(
        tmp_path / "runs", model=wan_model(tmp_path / "vae", task=task, causal=causal),
        data={"num_samples": 4, "batch_size": 2, "workers": 0, "buckets": [f"{frames}x4x4"]}))
    said = wanfw("sample", config, "--out", tmp_path / "s.safetensors", "--count", "2", "--video", tmp_path / "s.mp4",
                 check=0).stdout
    for span in streamed:
        assert f"streamed frames {span} to " in said, said
    for i in range(2):
        assert int(probe(tmp_path / f"s-{i}.mp4")["nb_read_frames"]) == 1 + 4 * (frames - 1)
        assert b"moof" in (tmp_path / f"s-{i}.mp4").read_bytes()  # fragments: read while it grows
    # The whole latents decoded at once and written at once: the same frames.
    wanfw("decode", tmp_path / "s.safetensors", "--vae", tmp_path / "vae", "--out", tmp_path / "again", check=0)
    for i in range(2):
        assert np.array_equal(mp4_frames(tmp_path / f"s-{i}.mp4"), mp4_frames(tmp_path / "again" / f"sample-{i}.mp4"))


def test_wanfw_decode_without_the_model_or_a_config_is_refused_saying_what_to_pass(tmp_path):
    save_file({"latents": torch.zeros(1, 16, 1, 2, 2)}, tmp_path / "latents.safetensors")
    result = wanfw("decode", tmp_path / "latents.safetensors", "--vae", tmp_path / "vae", "--out", tmp_path / "out")
    assert result.returncode == 2 and "does not say which model wrote it" in result.stderr
    assert "--model NAME" in result.stderr


@pytest.mark.parametrize("case, words", [("missing", "no such file or folder"),
                                         ("wider", "is a VAE of 16 latent channels; this model's latents have 48")])
def test_a_vae_the_model_cannot_use_is_refused_by_validate_and_run_before_training(tmp_path, case, words):
    reference_vae(tmp_path / "vae", "wan2.1")
    model = (wan_model(tmp_path / "absent") if case == "missing"
             else wan_model(tmp_path / "vae", in_dim=48, out_dim=48))
    config = write_config(tmp_path / "wan.json", base_config(tmp_path / "runs", model=model,
                                                             data={"buckets": [f"{LATENT_FRAMES}x4x4"]}))
    for command in ("validate", "run"):
        result = wanfw(command, config)
        assert result.returncode == 2 and "model.vae" in result.stderr and words in result.stderr, result.stderr
        assert "step 1" not in result.stdout
