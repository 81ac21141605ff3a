"""encode_dataset.py's sources: the items of a folder, a JSONL file or a prompt file, their captions and
fingerprints, and the frames of a video or image fitted to a bucket."""
import json
import math
import re
import sys
from pathlib import Path

import torch

VIDEO = {".mp4", ".mov", ".webm", ".mkv", ".avi", ".gif", ".m4v"}
IMAGE = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}


def caption_hash(caption: str) -> str:
    """FNV-1a (64 bits) of the UTF-8 caption, as wanfw writes it."""
    h = 0xCBF29CE484222325
    for byte in caption.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def clean_caption(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def list_items(source: Path, prompts=False):
    """(id, media path, caption, extras) for every item, in a stable order; --prompts: (id, None,
    prompt, {}) for every non-empty line of a text file. A JSONL line's extras are its control
    sources (--control): "control" and "mask" (videos) and "references" (images), as paths."""
    items = []
    if prompts:
        if not source.is_file():
            sys.exit(f"{source}: --prompts needs a text file, one prompt per line")
        lines = [line for line in source.read_text().splitlines() if line.strip()]
        items = [(f"prompt_{n:06d}", None, line, {}) for n, line in enumerate(lines)]
    elif source.is_file() and source.suffix == ".jsonl":
        problems = []  # every bad line, not the first alone: one pass fixes them all
        for number, line in enumerate(source.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{source}:{number}: not JSON ({e.msg} at column {e.colno})")
                continue
            if not isinstance(entry, dict) or "path" not in entry or "caption" not in entry:
                problems.append(f"{source}:{number}: each line is an object with 'path' and 'caption'")
                continue
            path = (source.parent / entry["path"]).resolve()
            if not path.is_file():
                problems.append(f"{source}:{number}: {path} does not exist")
                continue
            extras = {key: (source.parent / entry[key]).resolve() for key in ("control", "mask") if entry.get(key)}
            if entry.get("references"):
                extras["references"] = [(source.parent / r).resolve() for r in entry["references"]]
            items.append((entry.get("id", str(Path(entry["path"]).with_suffix(""))), path, entry["caption"], extras))
        if problems:
            sys.exit(f"{len(problems)} line(s) of {source} cannot be read:\n" + "\n".join(problems))
    elif source.is_dir():
        missing = []
        for path in sorted(p for p in source.rglob("*") if p.suffix.lower() in VIDEO | IMAGE):
            sidecar = path.with_suffix(".txt")
            if not sidecar.exists():
                missing.append(f"{path}: no caption ({sidecar.name} is missing)")
                continue
            items.append((str(path.relative_to(source).with_suffix("")), path, sidecar.read_text(), {}))
        if missing:
            sys.exit(f"{len(missing)} item(s) of {source} have no caption:\n" + "\n".join(missing))
    else:
        sys.exit(f"{source}: not a folder of media files nor a .jsonl file")
    ids = [item[0] for item in items]
    if len(set(ids)) != len(ids):
        sys.exit("two items share an id: " + ", ".join(sorted({i for i in ids if ids.count(i) > 1})[:5]))
    return items


def source_fingerprint(path: Path) -> str:
    stat = path.stat()
    return f"size={stat.st_size} mtime={stat.st_mtime_ns}"


def read_frames(path: Path, fps: float):
    """[F, 3, H, W] uint8 frames at `fps` (images: one frame)."""
    if path.suffix.lower() in IMAGE:
        from PIL import Image
        import numpy as np
        image = np.asarray(Image.open(path).convert("RGB"))
        return torch.from_numpy(image).permute(2, 0, 1).unsqueeze(0)
    import av
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames, times = [], []
        for frame in container.decode(stream):
            frames.append(torch.from_numpy(frame.to_ndarray(format="rgb24")).permute(2, 0, 1))
            times.append(float(frame.pts * frame.time_base) if frame.pts is not None else len(times) / float(stream.average_rate or fps))
    if not frames:
        raise ValueError("no frames")
    # Resample by time: the frame shown at k / fps, for as long as the clip lasts.
    duration = times[-1] + (times[-1] - times[-2] if len(times) > 1 else 1 / fps)
    picked, j = [], 0
    for k in range(int(duration * fps + 1e-6)):
        t = k / fps
        while j + 1 < len(times) and times[j + 1] <= t + 1e-6:
            j += 1
        picked.append(frames[j])
    return torch.stack(picked)


def choose_bucket(frames, buckets):
    """The bucket for a clip of `frames` [F, 3, H, W]: closest aspect ratio among those it fills."""
    f, _, h, w = frames.shape
    fits = [b for b in buckets if (b[0] == 1) == (f == 1) and b[0] <= f]
    if not fits:
        return None
    aspect = w / h
    return min(fits, key=lambda b: (abs(b[2] / b[1] - aspect), -b[0]))


def bucket_that_takes(frames, buckets, fps):
    """Why a clip of `frames` [F, 3, H, W] read at `fps` fits none of `buckets`, and what would take
    it: a bucket of the most frames of the form 4k + 1 it has (1 for an image), at the size of the
    listed bucket closest to its aspect ratio; a video of fewer than 5 frames, a higher --fps."""
    f, _, h, w = frames.shape
    same_kind = [b for b in buckets if (b[0] == 1) == (f == 1)]
    size = min(same_kind or buckets, key=lambda b: abs(b[2] / b[1] - w / h))
    if f == 1:
        return f"an image, and no bucket holds images: a bucket of 1x{size[1]}x{size[2]} would take it"
    why = f"{f} frames at {fps:g} fps, " + (f"fewer than the shortest bucket's {min(b[0] for b in same_kind)}"
                                            if same_kind else "and no bucket holds videos")
    if f < 5:  # a video bucket holds 5 frames at least (4k + 1, k >= 1)
        return f"{why}: a video needs 5 frames; read at --fps {math.ceil(fps * 5 / f)} or more it has them"
    return f"{why}: a bucket of {(f - 1) // 4 * 4 + 1}x{size[1]}x{size[2]} would take it"


def fit(frames, bucket):
    """Cover-resize and centre-crop to the bucket: [3, F, H, W] in [-1, 1]."""
    f, h, w = bucket
    x = frames[:f].float() / 127.5 - 1.0
    scale = max(h / x.shape[2], w / x.shape[3])
    size = (max(h, round(x.shape[2] * scale)), max(w, round(x.shape[3] * scale)))
    x = torch.nn.functional.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
    top, left = (size[0] - h) // 2, (size[1] - w) // 2
    return x[:, :, top:top + h, left:left + w].permute(1, 0, 2, 3).clamp(-1, 1)
