"""docs/first-try.md as a new user follows it: clips made here, the page's commands run as written
(tiny encoders, encoding, inspect, a base trained whole and exported, a LoRA with previews, the
exports), then the page's Python, which loads the adapters in diffusers beside the merged export."""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.equivalence import U, tiny_wan_rounding
from harness.media import probe, write_video
from harness.runs import BUILD, SOURCE, read_csv

pytest.importorskip("av")
pytest.importorskip("diffusers")

PAGE = SOURCE / "docs" / "first-try.md"
MARKER = "<!-- tests/integration/commands/test_first_try.py runs this block"
COLOURS = {"red": (220, 40, 40), "blue": (40, 60, 220), "green": (40, 200, 60)}


def page_blocks():
    """The page's command block (each command one entry, continuation lines joined, comments left
    out) and its Python block."""
    text = PAGE.read_text()
    shell = re.search(r"```sh\n(.*?)```", text[text.index(MARKER):], re.S).group(1)
    commands = [c.strip() for c in shell.replace("\\\n", " ").splitlines() if c.strip() and not c.startswith("#")]
    return commands, re.search(r"```python\n(.*?)```", text, re.S).group(1)


def make_clips(folder: Path):
    """Six 17-frame clips of a ball rolling left or right (64x64, a caption each), a 9-frame clip
    too short for the 17-frame bucket, and an image."""
    folder.mkdir()
    for name, colour in COLOURS.items():
        for sign, direction in ((1, "right"), (-1, "left")):
            def ball(i, y, x, colour=colour, sign=sign):
                image = torch.stack([torch.full_like(x, 200), torch.full_like(x, 220), torch.full_like(x, 250)], -1)
                image[(x - 32 - sign * (2 * i - 16)) ** 2 + (y - 32) ** 2 < 100] = torch.tensor(colour)
                return image.to(torch.uint8)
            write_video(folder / f"{name}_{direction}.mp4", 17, size=(64, 64), pattern=ball)
            (folder / f"{name}_{direction}.txt").write_text(f"a {name} ball rolls {direction}")
    write_video(folder / "short.mp4", 9, size=(64, 64))
    (folder / "short.txt").write_text("a short clip")
    from PIL import Image
    Image.new("RGB", (96, 64), (90, 140, 220)).save(folder / "sky.png")  # cover-resized and cropped to 64x64
    (folder / "sky.txt").write_text("the sky")


@pytest.mark.own_entry
def test_the_first_try_page_runs_as_written_own_clips_to_a_lora_that_learns_and_loads_in_diffusers(tmp_path):
    # The page's commands run from the repository's folder: here, a folder with its parts linked in.
    for name, target in (("tools", SOURCE / "tools"), ("examples", SOURCE / "examples"), ("build", BUILD),
                         (".venv", Path(sys.prefix))):
        (tmp_path / name).symlink_to(target)
    make_clips(tmp_path / "my-clips")
    commands, python = page_blocks()
    said = []
    for command in commands:
        result = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        said.append((shlex.split(command), result.stdout + result.stderr))
    by_tool = {words[1] if words[0].endswith("python") else " ".join(words[1:3]): out for words, out in said}

    encoded = by_tool["tools/encode_dataset.py"]
    assert "encoded 7, caption re-encoded 0, reused 0, fit no bucket 1" in encoded
    assert "not encoded: short: 9 frames at 16 fps, fewer than the shortest bucket's 17: a bucket of 9x64x64 would " \
           "take it" in encoded
    assert "6 caption(s) longer than --text-len 16 tokens were cut to 16" in encoded  # one character a token
    inspect = by_tool["data inspect"]
    assert "my-set: 7 samples, 7 distinct captions" in inspect
    assert "bucket 5x8x8: 6 samples, batch 1 per device, 6 steps of 1 per epoch" in inspect
    assert "bucket 1x8x8: 1 samples" in inspect

    # The LoRA learns the clips: every validation scores the same four samples at the same timesteps
    # and noise, step 0 the base alone.
    run = tmp_path / "runs" / "first-try-lora" / "version_0"
    scores = {int(r["step"]): float(r["val/loss"]) for r in read_csv(run / "metrics.csv") if r["val/loss"]}
    print(f"val/loss by step: {scores}")
    assert sorted(scores) == [0, 50, 100, 150, 200]
    assert scores[200] < 0.5 * scores[0]
    for step in (0, 200):  # previews before and after, decoded by the random VAE: 17 frames of 64x64
        stream = probe(run / "previews" / f"step-{step:08d}" / "sample-0.mp4")
        assert (int(stream["nb_read_frames"]), stream["width"], stream["height"]) == (17, 64, 64)
    for file in ("runs/my-lora/wan_lora.safetensors", "runs/my-lora/pytorch_lora_weights.safetensors",
                 "runs/my-lora-merged/diffusion_pytorch_model.safetensors"):
        assert (tmp_path / file).is_file(), file

    # The page's Python: the adapters in diffusers against the merged export. They differ by float32
    # rounding through the 4 blocks of 80 tokens (the merge adds one rounding a weight).
    (tmp_path / "check.py").write_text(python)
    result = subprocess.run([".venv/bin/python", "check.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    moved, differ = map(float, re.search(r"move the prediction by (\S+); the merged export differs from them by (\S+)",
                                         result.stdout).groups())
    print(result.stdout.strip())
    tolerance = 1000 * U + tiny_wan_rounding(global_batch=1, tokens=80, layers=4)
    assert differ <= tolerance and moved > 100 * tolerance
