#!/usr/bin/env python3
"""Encode videos or images and their captions into a wanfw data set folder (docs/data.md).

    .venv/bin/python tools/encode_dataset.py SOURCE OUT --vae VAE --text-encoder TEXT [--tokenizer TOK]
        --buckets 81x480x832,1x480x832 [--fps 16] [--text-len 512] [--dtype bfloat16] [--device cuda]

SOURCE is a folder of media files, each with a sidecar caption (clip.mp4 + clip.txt), or a JSONL
file of {"path": ..., "caption": ...} lines (paths relative to the file). Buckets are PIXEL
frames x height x width: frames 4k+1 (the Wan VAE's temporal stride 4; 1 for images), height and
width multiples of 16 for the Wan2.1 VAE and 32 for the Wan2.2 VAE (spatial stride x DiT patch).
Each item goes to the bucket whose aspect ratio is closest to its own (videos: among those it has
the frames for, at --fps), is resized to cover it and centre-cropped. Items that fit no bucket are
listed, never dropped silently.

The VAE is diffusers' AutoencoderKLWan (a folder, or a pipeline folder with vae/); latents are the
posterior mean, normalised with the VAE's latents_mean and latents_std as the Wan pipelines do. The
text encoder is transformers' UMT5EncoderModel with its tokenizer: captions are cleaned of extra
whitespace, tokenized to --text-len, and stored at their real length (the DiT zero-pads them, as the
official model does). The empty prompt's embedding is stored for caption dropout.

--prompts: SOURCE is a text file, one prompt a line, and only the text embeddings are stored (no
VAE, no buckets): the data of data-free distillation (docs/distillation.md).

--image-condition (for the i2v models, Wan2.2 I2V-A14B): each item also gets image_condition, the
latents of its first frame followed by zero frames, as the official I2V pipeline encodes its image
(the VAE gives the zero frames latents of their own, so they cannot be derived from the clip's).

Resumable: a re-run reuses every item whose source file (size, mtime), caption and encoding settings
are unchanged, re-encodes the text alone when only the caption changed, and encodes the rest. The
manifest is rewritten after every shard, so a killed run keeps what it finished.

Several GPUs: start one process per GPU with --rank R --world-size W (or under torchrun, which sets
RANK and WORLD_SIZE); each encodes every W-th item into its own shards, and the last to finish
merges the manifests.

The real weights, e.g. Wan2.2 TI2V-5B (Wan2.2 VAE, 32-pixel multiples):
    .venv/bin/python tools/encode_dataset.py clips/ data/my_set \\
        --vae Wan-AI/Wan2.2-TI2V-5B-Diffusers --text-encoder Wan-AI/Wan2.2-TI2V-5B-Diffusers \\
        --buckets 121x704x1280,121x1280x704,1x704x1280 --fps 24 --device cuda
"""
import argparse
import hashlib
import json
import os
import re
import sys
import time
import zlib
from pathlib import Path

import torch

FORMAT = "wanfw-latent-dataset"
VERSION = 1
VIDEO = {".mp4", ".mov", ".webm", ".mkv", ".avi", ".gif", ".m4v"}
IMAGE = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}


def log(message):
    print(f"[encode_dataset] {message}", flush=True)


def caption_hash(caption: str) -> str:
    """FNV-1a (64 bits) of the UTF-8 caption, as wanfw writes it."""
    h = 0xCBF29CE484222325
    for byte in caption.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def clean_caption(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# --- sources -----------------------------------------------------------------------------------

def list_items(source: Path, prompts=False):
    """(id, media path, caption) for every item, in a stable order; --prompts: (id, None, prompt)
    for every non-empty line of a text file."""
    items = []
    if prompts:
        if not source.is_file():
            sys.exit(f"{source}: --prompts needs a text file, one prompt per line")
        lines = [line for line in source.read_text().splitlines() if line.strip()]
        items = [(f"prompt_{n:06d}", None, line) for n, line in enumerate(lines)]
    elif source.is_file() and source.suffix == ".jsonl":
        for number, line in enumerate(source.read_text().splitlines(), 1):
            if not line.strip():
                continue
            entry = json.loads(line)
            if "path" not in entry or "caption" not in entry:
                sys.exit(f"{source}:{number}: each line needs 'path' and 'caption'")
            path = (source.parent / entry["path"]).resolve()
            items.append((entry.get("id", str(Path(entry["path"]).with_suffix(""))), path, entry["caption"]))
    elif source.is_dir():
        for path in sorted(p for p in source.rglob("*") if p.suffix.lower() in VIDEO | IMAGE):
            sidecar = path.with_suffix(".txt")
            if not sidecar.exists():
                sys.exit(f"{path}: no caption ({sidecar.name} is missing)")
            items.append((str(path.relative_to(source).with_suffix("")), path, sidecar.read_text()))
    else:
        sys.exit(f"{source}: not a folder of media files nor a .jsonl file")
    ids = [i for i, _, _ in items]
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


def fit(frames, bucket):
    """Cover-resize and centre-crop to the bucket: [3, F, H, W] in [-1, 1]."""
    f, h, w = bucket
    x = frames[:f].float() / 127.5 - 1.0
    scale = max(h / x.shape[2], w / x.shape[3])
    size = (max(h, round(x.shape[2] * scale)), max(w, round(x.shape[3] * scale)))
    x = torch.nn.functional.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
    top, left = (size[0] - h) // 2, (size[1] - w) // 2
    return x[:, :, top:top + h, left:left + w].permute(1, 0, 2, 3).clamp(-1, 1)


# --- encoders ----------------------------------------------------------------------------------

class Encoders:
    def __init__(self, args, device, dtype):
        from diffusers import AutoencoderKLWan
        from transformers import AutoTokenizer, UMT5EncoderModel

        def sub(path, folder):
            """A model folder itself, or a pipeline folder (local or on the Hub) holding it in `folder`."""
            p = Path(path)
            local_model = p.exists() and not (p / folder).is_dir()
            return {} if local_model else {"subfolder": folder}
        self.vae = AutoencoderKLWan.from_pretrained(args.vae, **sub(args.vae, "vae")).to(device).eval() \
            if args.vae else None
        self.text = UMT5EncoderModel.from_pretrained(args.text_encoder, **sub(args.text_encoder, "text_encoder"))
        self.text = self.text.to(device).eval()
        tokenizer = args.tokenizer or args.text_encoder
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer, **sub(tokenizer, "tokenizer"))
        self.device, self.dtype, self.text_len = device, dtype, args.text_len
        if self.vae is None:  # prompts alone
            return
        c = self.vae.config
        self.spatial = c.scale_factor_spatial or 8
        self.temporal = c.scale_factor_temporal or 4
        self.mean = torch.tensor(c.latents_mean).view(1, -1, 1, 1, 1).to(device)
        self.inv_std = 1.0 / torch.tensor(c.latents_std).view(1, -1, 1, 1, 1).to(device)

    @torch.no_grad()
    def latents(self, video):
        """[3, F, H, W] in [-1, 1] -> [C, F', H', W'] normalised latents."""
        x = video.unsqueeze(0).to(self.device, self.vae.dtype)
        z = self.vae.encode(x).latent_dist.mode()
        return ((z.float() - self.mean) * self.inv_std)[0].to(self.dtype).cpu()

    def image_condition(self, video):
        """The first frame of [3, F, H, W] followed by F - 1 zero frames, encoded: [C, F', H', W']."""
        condition = torch.zeros_like(video)
        condition[:, 0] = video[:, 0]
        return self.latents(condition)

    @torch.no_grad()
    def caption(self, text):
        """[L, text_dim] at the caption's real length."""
        tokens = self.tokenizer([clean_caption(text)], padding="max_length", max_length=self.text_len, truncation=True,
                                add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
        length = int(tokens.attention_mask.gt(0).sum())
        hidden = self.text(tokens.input_ids.to(self.device), tokens.attention_mask.to(self.device)).last_hidden_state
        return hidden[0, :max(length, 1)].to(self.dtype).cpu()


# --- the folder ----------------------------------------------------------------------------------

class Folder:
    """A data set folder being written: shards filled and flushed atomically, the manifest after each."""

    def __init__(self, out: Path, prefix: str, shard_bytes: int, encoders: dict, fingerprint: str, manifest_name: str):
        self.out, self.prefix, self.shard_bytes, self.manifest_name = out, prefix, shard_bytes, manifest_name
        (out / "shards").mkdir(parents=True, exist_ok=True)
        self.manifest = {"format": FORMAT, "version": VERSION, "encoders": encoders, "encoding_fingerprint": fingerprint,
                         "empty_caption": {}, "shards": [], "samples": []}
        existing = {p.name for p in (out / "shards").glob(f"{prefix}*.safetensors")}
        self.next_shard = len(existing)
        while f"{prefix}{self.next_shard:05d}.safetensors" in existing:
            self.next_shard += 1
        self.pending, self.pending_bytes, self.metadata = {}, 0, {}
        self.shard = None

    def store(self, name, tensor):
        if self.shard is None:
            self.shard = f"shards/{self.prefix}{self.next_shard:05d}.safetensors"
            self.next_shard += 1
        self.pending[name] = tensor.contiguous()
        self.pending_bytes += tensor.numel() * tensor.element_size()
        return {"shard": self.shard, "tensor": name, "shape": list(tensor.shape)}

    def add(self, sample):
        self.manifest["samples"].append(sample)
        if self.pending_bytes >= self.shard_bytes:
            self.flush()

    def flush(self):
        if self.pending:
            from safetensors.torch import save_file
            path = self.out / self.shard
            temporary = path.with_name(path.name + ".tmp")
            save_file(self.pending, str(temporary), metadata=self.metadata)
            with open(temporary, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(temporary, path)
            data = path.read_bytes()
            self.manifest["shards"].append({"file": self.shard, "bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"})
            self.pending, self.pending_bytes, self.metadata, self.shard = {}, 0, {}, None
        self.write_manifest()

    def write_manifest(self):
        write_json(self.out / self.manifest_name, self.manifest)


def write_json(path: Path, value):
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(value, indent=1) + "\n")
    with open(temporary, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(temporary, path)


def previous_manifest(out: Path):
    path = out / "manifest.json"
    if not path.exists():
        return None
    m = json.loads(path.read_text())
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        sys.exit(f"{path}: not a version {VERSION} wanfw data set; choose another output folder")
    return m


def encoding_fingerprint(args, encoders):
    settings = {"vae": str(args.vae), "vae_config": dict(encoders.vae.config) if encoders.vae else None,
                "text_encoder": str(args.text_encoder),
                "tokenizer": str(args.tokenizer or args.text_encoder), "text_len": args.text_len,
                "fps": args.fps, "dtype": args.dtype, "buckets": args.buckets,
                "image_condition": args.image_condition}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def parse_buckets(text, spatial_multiple=None):
    buckets = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", part.strip())
        if not m:
            sys.exit(f"--buckets: '{part}' is not FRAMESxHEIGHTxWIDTH in pixels")
        f, h, w = map(int, m.groups())
        if f < 1 or (f - 1) % 4 != 0:
            sys.exit(f"--buckets: {part}: frames must be 4k+1 (1, 5, ..., 81, 121) for the Wan VAE")
        if spatial_multiple and (h % spatial_multiple or w % spatial_multiple):
            sys.exit(f"--buckets: {part}: height and width must be multiples of {spatial_multiple} for this VAE "
                     f"(its spatial stride x the DiT's patch of 2)")
        buckets.append((f, h, w))
    return buckets


def merge(out: Path, world: int, order):
    """Joins the ranks' manifests into manifest.json (samples in source order)."""
    parts = [json.loads((out / f"manifest.rank{r}-of-{world}.json").read_text()) for r in range(world)]
    merged = dict(parts[0])
    shards = {s["file"]: s for p in parts for s in p["shards"]}  # reused shards appear in every part
    merged["shards"] = [shards[f] for f in sorted(shards)]
    position = {item_id: i for i, item_id in enumerate(order)}
    merged["samples"] = sorted((s for p in parts for s in p["samples"]), key=lambda s: position[s["id"]])
    write_json(out / "manifest.json", merged)
    for r in range(world):
        (out / f"manifest.rank{r}-of-{world}.json").unlink()
    log(f"merged {world} ranks: {len(merged['samples'])} samples in {len(merged['shards'])} shards")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--vae", help="required unless --prompts")
    parser.add_argument("--text-encoder", required=True)
    parser.add_argument("--tokenizer")
    parser.add_argument("--buckets", help="pixel FxHxW list, e.g. 81x480x832,1x480x832 (required unless --prompts)")
    parser.add_argument("--prompts", action="store_true",
                        help="SOURCE is a text file of prompts, one a line: text embeddings alone (data-free "
                             "distillation, docs/distillation.md)")
    parser.add_argument("--fps", type=float, default=16.0)
    parser.add_argument("--text-len", type=int, default=512)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shard-mb", type=float, default=256)
    parser.add_argument("--image-condition", action="store_true",
                        help="also store each item's first frame followed by zero frames, encoded (i2v models)")
    parser.add_argument("--rank", type=int, default=int(os.environ.get("RANK", 0)))
    parser.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", 1)))
    args = parser.parse_args(argv)
    if not 0 <= args.rank < args.world_size:
        sys.exit(f"--rank {args.rank} is outside --world-size {args.world_size}")
    device = torch.device(args.device)
    if device.type == "cuda" and args.world_size > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", args.rank)) % torch.cuda.device_count())
    dtype = getattr(torch, args.dtype)

    if not args.prompts and not (args.vae and args.buckets):
        sys.exit("--vae and --buckets are needed to encode media (or --prompts for a text file of prompts)")
    items = list_items(args.source, args.prompts)
    encoders = Encoders(args, device, dtype)
    buckets = [] if args.prompts else parse_buckets(args.buckets, 2 * encoders.spatial)
    fingerprint = encoding_fingerprint(args, encoders)
    encoder_names = {"vae": str(args.vae), "text_encoder": str(args.text_encoder)}
    args.out.mkdir(parents=True, exist_ok=True)
    old = previous_manifest(args.out)
    reusable = {}
    if old and old.get("encoding_fingerprint") == fingerprint:
        reusable = {s["id"]: s for s in old["samples"]}
    elif old:
        log("the encoding settings changed: every item is encoded again")
    single = args.world_size == 1
    prefix = "shard-" if single else f"rank{args.rank}-"
    folder = Folder(args.out, prefix, int(args.shard_mb * (1 << 20)), encoder_names, fingerprint,
                    "manifest.json" if single else f"manifest.rank{args.rank}-of-{args.world_size}.json")
    if reusable:  # listed from the start, so that a manifest written mid-run is whole
        folder.manifest["shards"] = list(old["shards"])

    # Captions already encoded (reused shards), by hash; the empty prompt first.
    texts = {}
    if old and reusable:
        for s in old["samples"]:
            texts.setdefault(s["caption_hash"], {"context": s["fields"]["context"]})
        if old.get("empty_caption"):
            texts.setdefault(caption_hash(""), old["empty_caption"])
    kept_shards = set()

    def text_fields(caption):
        key = caption_hash(caption)
        if key not in texts:
            texts[key] = {"context": folder.store(f"context/caption-{key}", encoders.caption(caption))}
            folder.metadata[f"caption/{key}"] = caption
        return texts[key]

    mine = [item for i, item in enumerate(items) if i % args.world_size == args.rank]
    encoded = text_only = reused = 0
    unfit = []
    started = time.monotonic()
    for n, (item_id, path, caption) in enumerate(mine, 1):
        source = source_fingerprint(path) if path else caption_hash(caption)
        before = reusable.get(item_id)
        if before and before["source_fingerprint"] == source:
            sample = dict(before)
            if before["caption_hash"] != caption_hash(caption):  # a new caption: its text alone
                sample["caption_hash"] = caption_hash(caption)
                sample["fields"] = {**before["fields"], **text_fields(caption)}
                text_only += 1
            else:
                reused += 1
        elif path is None:  # a prompt alone: its text embedding (the latents come from elsewhere)
            sample = {"id": item_id, "bucket": "1x1x1", "caption_hash": caption_hash(caption),
                      "source_fingerprint": source, "fields": text_fields(caption)}
            encoded += 1
        else:
            frames = read_frames(path, args.fps)
            bucket = choose_bucket(frames, buckets)
            if bucket is None:
                unfit.append(f"{item_id}: {frames.shape[0]} frames at {args.fps:g} fps fit no bucket")
                continue
            video = fit(frames, bucket)
            latents = encoders.latents(video)
            fields = {"latents": folder.store(f"latents/{item_id}", latents)}
            if args.image_condition:
                fields["image_condition"] = folder.store(f"image_condition/{item_id}", encoders.image_condition(video))
            sample = {"id": item_id, "bucket": "x".join(map(str, latents.shape[1:])),
                      "caption_hash": caption_hash(caption), "source_fingerprint": source,
                      "fields": {**fields, **text_fields(caption)}}
            encoded += 1
        kept_shards.update(t["shard"] for t in sample["fields"].values())
        folder.add(sample)
        if n % 50 == 0 or n == len(mine):
            log(f"rank {args.rank}: {n}/{len(mine)} items ({time.monotonic() - started:.0f} s)")
    folder.manifest["empty_caption"] = text_fields("")
    kept_shards.update(t["shard"] for t in folder.manifest["empty_caption"].values())
    folder.flush()
    # Shards of the previous encoding that no sample uses any more leave the manifest.
    folder.manifest["shards"] = [s for s in folder.manifest["shards"] if s["file"] in kept_shards]
    folder.write_manifest()
    for line in unfit:
        log(f"not encoded: {line}")
    log(f"rank {args.rank}: encoded {encoded}, caption re-encoded {text_only}, reused {reused}, fit no bucket "
        f"{len(unfit)}")
    if args.world_size > 1:
        done = [args.out / f"manifest.rank{r}-of-{args.world_size}.json" for r in range(args.world_size)]
        if all(p.exists() for p in done):
            lock = args.out / ".merge.lock"
            try:
                os.close(os.open(lock, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return 0
            merge(args.out, args.world_size, [i for i, _, _ in items])
            lock.unlink()
    # Shards no sample uses any more (their items were re-encoded) are removed.
    final = json.loads((args.out / "manifest.json").read_text()) if (args.out / "manifest.json").exists() else None
    if final and args.world_size == 1:
        listed = {s["file"] for s in final["shards"]}
        for stale in (args.out / "shards").glob("*.safetensors"):
            if f"shards/{stale.name}" not in listed:
                stale.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
