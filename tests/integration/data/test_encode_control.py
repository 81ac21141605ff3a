"""tools/encode_dataset.py --control (the VACE models): a control video, a mask video and a reference
image encoded into vace_context as diffusers' WanVACEPipeline prepares it (the mask thresholded into
inactive and reactive latents, folded onto the latent grid, the reference letterboxed and prepended),
with tiny random encoders built here; the encoded set trains a tiny VACE model."""
import json
import sys

import pytest
import torch
from safetensors.torch import load_file

from harness.media import TOOL, encode_dataset, tiny_encoders, write_video
from harness.runs import base_config, wanfw, write_config

av = pytest.importorskip("av")

TEXT_LEN = 16


def frame_ramp(i, y, x):
    return torch.stack([(x * 5 + i * 9) % 256, (y * 7) % 256, (x + y + 40 * i) % 256], -1).to(torch.uint8)


def control_ramp(i, y, x):
    return torch.stack([(y * 6 + i * 20) % 256, (x * 3) % 256, torch.full_like(x, 90)], -1).to(torch.uint8)


def mask_block(i, y, x):
    """White (generate) in a 16 x 16 block that moves right one block every 2 frames."""
    inside = (y >= 16) & (x >= 16 * (i // 2)) & (x < 16 * (i // 2) + 16)
    return (inside.to(torch.uint8) * 255).unsqueeze(-1).expand(-1, -1, 3).contiguous()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("control")
    for name, pattern in (("clip", frame_ramp), ("pose", control_ramp), ("mask", mask_block)):
        write_video(root / f"{name}.mp4", 6, size=(32, 48), pattern=pattern)  # the bucket's own size
    from PIL import Image
    Image.new("RGB", (80, 64), (200, 30, 30)).save(root / "subject.png")  # another aspect: letterboxed
    lines = [{"path": "clip.mp4", "caption": "a red ball moves left", "control": "pose.mp4", "mask": "mask.mp4",
              "references": ["subject.png"]},
             {"id": "control_only", "path": "clip.mp4", "caption": "a blue ball", "control": "pose.mp4"}]
    (root / "items.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    return root, tiny_encoders(root / "encoders")


def encode(root, encoders, out):
    result = encode_dataset(root / "items.jsonl", out, "--vae", encoders / "vae", "--text-encoder",
                            encoders / "text_encoder", "--tokenizer", encoders / "tokenizer", "--buckets", "5x32x48",
                            "--text-len", TEXT_LEN, "--dtype", "float32", "--control")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((out / "manifest.json").read_text())


def stored(out, sample, field):
    where = sample["fields"][field]
    return load_file(out / where["shard"])[where["tensor"]]


def diffusers_context(root, encoders, mask=True, references=True):
    """WanVACEPipeline's conditioning for the same decoded frames (read as the tool reads them)."""
    sys.path.insert(0, str(TOOL.parent))
    from dataset_media import read_frames
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanVACEPipeline, WanVACETransformer3DModel
    from PIL import Image
    pil = lambda frames: [Image.fromarray(f.permute(1, 2, 0).numpy()) for f in frames[:5]]  # noqa: E731
    transformer = WanVACETransformer3DModel(num_attention_heads=2, attention_head_dim=12, in_channels=4,
                                            out_channels=4, text_dim=32, ffn_dim=32, num_layers=2,
                                            vace_layers=[0], vace_in_channels=72)
    pipe = WanVACEPipeline(tokenizer=None, text_encoder=None, vae=AutoencoderKLWan.from_pretrained(encoders / "vae"),
                           scheduler=FlowMatchEulerDiscreteScheduler(), transformer=transformer)
    with torch.no_grad():
        video, masks, refs = pipe.preprocess_conditions(
            pil(read_frames(root / "pose.mp4", 16)), pil(read_frames(root / "mask.mp4", 16)) if mask else None,
            Image.open(root / "subject.png").convert("RGB") if references else None, 1, 32, 48, 5, torch.float32,
            torch.device("cpu"))
        latents = pipe.prepare_video_latents(video, masks, refs, None, torch.device("cpu"))
        return torch.cat([latents, pipe.prepare_masks(masks, refs, None)], 1)[0]


def test_control_mask_and_reference_encode_to_the_context_diffusers_prepares(sources, tmp_path):
    root, encoders = sources
    manifest = encode(root, encoders, tmp_path / "set")
    sample = next(s for s in manifest["samples"] if s["id"] == "clip")
    context, latents = stored(tmp_path / "set", sample, "vace_context"), stored(tmp_path / "set", sample, "latents")
    # 5 frames -> 2 latent frames of 4 x 6, after the reference's one: 4 + 4 latent channels and 64 mask cells.
    assert sample["bucket"] == "3x4x6" and sample["reference_frames"] == 1
    assert context.shape == (72, 3, 4, 6) and latents.shape == (4, 3, 4, 6)
    expected = diffusers_context(root, encoders)
    assert expected.shape == context.shape
    assert torch.allclose(context, expected, atol=1e-4, rtol=1e-4), (context - expected).abs().max()
    # The reference frame: its latent in the latents and in the context, zeros beside it, a zero mask.
    assert torch.equal(context[:4, 0], latents[:, 0])
    assert not context[4:, 0].any() and context[8:, 1:].any()
    # Its mask folds 8 x 8 pixel cells onto the latent grid, and splits the control by it.
    control_only = next(s for s in manifest["samples"] if s["id"] == "control_only")
    plain = stored(tmp_path / "set", control_only, "vace_context")
    assert control_only["bucket"] == "2x4x6" and control_only["reference_frames"] == 0
    assert torch.allclose(plain, diffusers_context(root, encoders, mask=False, references=False), atol=1e-4, rtol=1e-4)
    assert torch.equal(plain[8:], torch.ones_like(plain[8:]))  # no mask: every pixel generated


def test_a_one_pixel_mask_lands_in_the_channel_of_its_place_in_the_8x8_cell():
    sys.path.insert(0, str(TOOL.parent))
    from dataset_control import mask_channels
    for row, column, frame in ((0, 0, 1), (13, 22, 4), (31, 47, 7), (5, 5, 0)):
        mask = torch.zeros(9, 32, 48)
        mask[frame, row, column] = 1
        cells = mask_channels(mask, 3, 8)  # 9 frames -> 3 latent frames, nearest-exact
        hot = cells.nonzero().tolist()
        # Latent frame t takes pixel frame floor((t + 0.5) * 9 / 3): 1, 4, 7; frame 0 is not sampled.
        expected = [[8 * (row % 8) + column % 8, frame // 3, row // 8, column // 8]] if frame in (1, 4, 7) else []
        assert hot == expected, (row, column, frame, hot)


def test_an_encoded_control_set_verifies_and_trains_a_tiny_vace_model(sources, tmp_path):
    root, encoders = sources
    encode(root, encoders, tmp_path / "set")
    assert "ok: 2 samples" in wanfw("data", "verify", tmp_path / "set", check=0).stdout
    inspected = wanfw("data", "inspect", tmp_path / "set", check=0).stdout
    assert "field vace_context: F32, one shape per bucket" in inspected
    assert "reference images: 1 sample(s) begin with 1 latent frame(s) of them" in inspected
    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny-vace"},
                         data={"name": "latent_shards", "path": str(tmp_path / "set"), "batch_size": 1},
                         trainer={"max_steps": 2, "log_every": 1})
    out = wanfw("run", write_config(tmp_path / "run.json", config), check=0).stdout
    assert "2 samples in 2 bucket(s)" in out and "step 2/2" in out


def test_reference_frames_that_leave_no_video_frame_are_refused_naming_the_sample(sources, tmp_path):
    root, encoders = sources
    manifest = encode(root, encoders, tmp_path / "set")
    manifest["samples"][0]["reference_frames"] = 3  # its bucket 3x4x6: nothing left of the video
    (tmp_path / "set" / "manifest.json").write_text(json.dumps(manifest))
    result = wanfw("data", "verify", tmp_path / "set")
    assert result.returncode != 0
    assert "samples[0]: 'reference_frames' is 3, but its bucket 3x4x6 has 3 latent frames in all" in result.stderr
