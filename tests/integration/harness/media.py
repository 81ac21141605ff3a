"""Previews as pictures and video: the frames a preview must show, the mp4 file read back with an
independent reader (ffprobe, PyAV), and tiny text and VAE encoders for encode_dataset."""

import json
import os
import subprocess
from pathlib import Path

import av
import numpy as np
import torch

from harness.preloaded import Program
from harness.runs import SOURCE


LATENT_FRAMES, FRAMES, SIZE, FPS = 3, 9, 32, 16  # 1 + 4 (T - 1) frames of 8 x 4 pixels; Wan2.1's 16 fps


# The random VAE's frames are busy (neighbouring pixels 28 levels of 255 apart on average), so the
# formats' losses are judged where they keep detail: luma (BT.601), and each frame's mean colour.
# yuv420p keeps luma at full resolution and chroma at half, and H.264 at CRF 18 quantises both:
# luma measured 3.7 levels from the decoded frames on average, frame means within 1.7. A GIF frame's
# 256-colour palette (median cut, entries the means of their pixels): luma 5.5, means within 0.2.
# The bounds leave about 2x.
MP4_LUMA_BOUND, GIF_LUMA_BOUND, FRAME_MEAN_BOUND = 7.0, 10.0, 4.0


def wan_model(vae, **extra):
    return {"name": "wan22_flow_matching", "preset": "tiny", "in_dim": 16, "out_dim": 16, "text_len": 4,
            "preview_steps": 2, "sample_steps": 2, "vae": str(vae), **extra}


def expected_frames(vae, latents):
    """diffusers' decode of the model's (normalised) latents as uint8 frames [B, F, H, W, 3]."""
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    with torch.no_grad():
        video = vae.decode(latents * std + mean).sample
    return ((video.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 4, 1).numpy()


def probe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
                          "stream=codec_name,width,height,pix_fmt,nb_read_frames,r_frame_rate", "-of", "json",
                          str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["streams"][0]


def mp4_frames(path):
    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])


def errors(frames, expected):
    """(mean |diff| of BT.601 luma, the largest |diff| of a frame's mean colour), in levels of 255."""
    frames, expected = frames.astype(np.float64), expected.astype(np.float64)
    luma = np.array([0.299, 0.587, 0.114])
    return (np.abs(frames @ luma - expected @ luma).mean(),
            np.abs(frames.mean(axis=(1, 2)) - expected.mean(axis=(1, 2))).max())


def assert_close(frames, expected, what, luma_bound=MP4_LUMA_BOUND):
    assert frames.shape == expected.shape
    luma, means = errors(frames, expected)
    print(f"{what}: luma mean |diff| {luma:.2f}, frame mean colours within {means:.2f} levels")
    assert luma <= luma_bound and means <= FRAME_MEAN_BOUND


TOOL = SOURCE / "tools" / "encode_dataset.py"
# The tool without its start-up (preloaded.py): torch, PyAV, diffusers' VAE and
# transformers' UMT5 imported once a test process, 13 s of CPU a launch.
ENCODER = Program(["torch", "av", "PIL.Image", "diffusers:AutoencoderKLWan", "transformers:UMT5EncoderModel",
                   "transformers:AutoTokenizer"], script=TOOL)


def encode_dataset(*args, timeout=600) -> subprocess.CompletedProcess:
    """`python tools/encode_dataset.py ARGS`, its output captured as subprocess.run's."""
    return ENCODER.run([TOOL, *map(str, args)], timeout, os.environ)
WORDS = ["a", "red", "blue", "ball", "moves", "left", "right", "over", "the", "grass", "sky", "image", "of", "still"]


def tiny_encoders(folder: Path):
    """tools/make_tiny_encoders.py's encoders (a Wan2.1-style VAE of 4 latent channels, strides
    4 x 8 x 8, and a UMT5 encoder 32 wide), its tokenizer one token a word of WORDS."""
    import sys
    sys.path.insert(0, str(SOURCE / "tools"))
    from make_tiny_encoders import make_tiny_encoders
    return make_tiny_encoders(folder, words=WORDS)


def write_video(path: Path, frames: int, size=(48, 64), fps=16, pattern=None):
    """An mp4 of `frames` frames of `size` (height, width): moving colour ramps, or `pattern(i, y, x)`
    (uint8 RGB [height, width, 3] of frame i)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.height, stream.width = size
        stream.pix_fmt = "yuv420p"
        for i in range(frames):
            y, x = torch.meshgrid(torch.arange(size[0]), torch.arange(size[1]), indexing="ij")
            image = pattern(i, y, x) if pattern else \
                torch.stack([(x * 4 + i * 8) % 256, (y * 4) % 256, torch.full_like(x, 128)], -1).to(torch.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image.numpy(), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)

