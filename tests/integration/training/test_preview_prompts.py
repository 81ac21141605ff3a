"""validation.preview_prompts: prompts encoded ahead of time (tools/encode_dataset.py --prompts)
previewed at each validation instead of held-out samples, at the model's sample_size."""
import io

import pytest
from PIL import Image
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from harness.media import FPS, assert_close, encode_dataset, expected_frames, mp4_frames, probe, tiny_encoders, wan_model
from harness.references import reference_vae
from harness.runs import base_config, wanfw, write_config

PROMPTS = ["a red ball moves left", "the sky over the grass"]
SAMPLE_SIZE = (2, 6, 4)  # latent frames x height x width: not the data's 3x4x4, so the shape shows where it came from
FRAMES, HEIGHT, WIDTH = 1 + 4 * (SAMPLE_SIZE[0] - 1), 8 * SAMPLE_SIZE[1], 8 * SAMPLE_SIZE[2]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prompts")
    encoders = tiny_encoders(tmp / "encoders")
    (tmp / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    out = tmp / "prompt_set"
    result = encode_dataset(tmp / "prompts.txt", out, "--prompts", "--text-encoder", encoders / "text_encoder",
                            "--tokenizer", encoders / "tokenizer", "--text-len", 8)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def preview_config(tmp, prompt_set, model_extra, validation_extra=None):
    return base_config(tmp / "runs", model=wan_model(tmp / "vae", text_len=8, **model_extra),
                       data={"num_samples": 8, "batch_size": 2, "workers": 0, "buckets": ["3x4x4"]},
                       trainer={"max_steps": 2, "log_every": 1, "progress": "lines"},
                       validation={"every": 2, "num_samples": 2, "preview_samples": 4,
                                   "preview_prompts": str(prompt_set), **(validation_extra or {})},
                       checkpoint={"every": 0, "keep_last": 0},
                       loggers=[{"name": "csv"}, {"name": "tensorboard", "flush_every": 1}])


def test_preview_prompts_replace_held_out_samples_in_previews_at_the_models_sample_size(tmp_path, prompts):
    vae = reference_vae(tmp_path / "vae", "wan2.1")
    size = "x".join(map(str, SAMPLE_SIZE))
    result = wanfw("run", write_config(tmp_path / "wan.json", preview_config(tmp_path, prompts, {"sample_size": size})),
                   check=0)
    run_dir = tmp_path / "runs" / "exp" / "version_0"
    folder = run_dir / "previews" / "step-00000002"
    # Both prompts (preview_samples 4 is more than the set holds), none of the held-out samples;
    # the held-out samples are still scored.
    assert sorted(p.name for p in folder.glob("*.mp4")) == ["prompt-0.mp4", "prompt-1.mp4"]
    assert "previews at step 2: 2 sample(s) decoded in" in result.stdout and "val/loss" in result.stdout
    tb = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    tb.Reload()
    for i in range(len(PROMPTS)):
        latents = load_file(folder / f"prompt-{i}.safetensors")["latents"]
        assert tuple(latents.shape) == (1, 16, *SAMPLE_SIZE)
        stream = probe(folder / f"prompt-{i}.mp4")
        assert (stream["width"], stream["height"], int(stream["nb_read_frames"])) == (WIDTH, HEIGHT, FRAMES)
        assert stream["r_frame_rate"] == f"{FPS}/1"
        assert_close(mp4_frames(folder / f"prompt-{i}.mp4"), expected_frames(vae, latents)[0], f"prompt {i}")
        with Image.open(io.BytesIO(tb.Images(f"preview/prompt-{i}")[0].encoded_image_string)) as gif:
            assert gif.n_frames == FRAMES and gif.size == (WIDTH, HEIGHT)
    assert not any(tag.startswith("preview/sample-") for tag in tb.Tags()["images"])


def test_a_preview_prompt_without_the_models_sample_size_is_refused_naming_the_option(tmp_path, prompts):
    reference_vae(tmp_path / "vae", "wan2.1")
    result = wanfw("run", write_config(tmp_path / "wan.json", preview_config(tmp_path, prompts, {})))
    assert result.returncode != 0
    assert "validation.preview_prompts" in result.stderr and "model.sample_size is not set" in result.stderr


def test_preview_prompts_without_validation_are_refused_before_training(tmp_path, prompts):
    reference_vae(tmp_path / "vae", "wan2.1")
    config = preview_config(tmp_path, prompts, {"sample_size": "2x6x4"}, {"every": 0})
    result = wanfw("run", write_config(tmp_path / "wan.json", config))
    assert result.returncode == 2
    assert "validation.preview_prompts" in result.stderr and "validation.every is 0" in result.stderr
    assert "step 1" not in result.stdout
