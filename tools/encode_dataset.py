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
With --last-frame (first-last-frame video, model.last_frame: true) the clip's last frame is kept
too, after the zero frames, as diffusers' Wan I2V pipeline encodes a last_image.

--control (for the VACE models, docs/control.md): SOURCE is a JSONL file whose lines may also name
"control" (a video: pose, depth, edges, or the source of an inpainting), "mask" (a video, white =
generate) and "references" (images of a subject); each item gets vace_context, the control split by
the mask into inactive and reactive latents and the mask folded onto the latent grid, and each
reference image one latent frame prepended to both its latents and its context (tools/dataset_control.py).
The control and mask videos are read at --fps and fitted to the item's bucket as the video is.

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
from pathlib import Path

import torch

from dataset_control import control_fields
from dataset_encoders import Encoders
from dataset_folder import MANIFEST, Folder, log, merge, previous_manifest
from dataset_media import (bucket_that_takes, caption_hash, choose_bucket, fit, list_items, read_frames,
                           source_fingerprint)


def encoding_fingerprint(args, encoders):
    settings = {"vae": str(args.vae), "vae_config": dict(encoders.vae.config) if encoders.vae else None,
                "text_encoder": str(args.text_encoder),
                "tokenizer": str(args.tokenizer or args.text_encoder), "text_len": args.text_len,
                "fps": args.fps, "dtype": args.dtype, "buckets": args.buckets,
                "image_condition": args.image_condition, "last_frame": args.last_frame, "control": args.control}
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


def control_sample(encoders, video, extras, bucket, fps):
    """An item's latents and vace_context (tools/dataset_control.py), and its reference frames;
    ValueError when a control or mask video is shorter than the bucket."""
    def fitted(key):
        if key not in extras:
            return None
        frames = read_frames(extras[key], fps)
        if frames.shape[0] < bucket[0]:
            raise ValueError(f"its {key} has {frames.shape[0]} frames at {fps:g} fps, the bucket {bucket[0]}")
        return fit(frames, bucket)
    control, mask = fitted("control"), fitted("mask")
    mask = None if mask is None else ((mask[0] + 1) / 2).clamp(0, 1)
    references = [read_frames(p, fps)[0].float() / 127.5 - 1.0 for p in extras.get("references", [])]
    return control_fields(encoders, video, control, mask, references), len(references)


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
    parser.add_argument("--last-frame", action="store_true",
                        help="with --image-condition: the last frame kept too (first-last-frame video)")
    parser.add_argument("--control", action="store_true",
                        help="also store each item's vace_context from its JSONL control, mask and references "
                             "(VACE models)")
    parser.add_argument("--rank", type=int, default=int(os.environ.get("RANK", 0)))
    parser.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", 1)))
    args = parser.parse_args(argv)
    if not 0 <= args.rank < args.world_size:
        sys.exit(f"--rank {args.rank} is outside --world-size {args.world_size}")
    device = torch.device(args.device)
    if device.type == "cuda" and args.world_size > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", args.rank)) % torch.cuda.device_count())
    dtype = getattr(torch, args.dtype)

    if args.last_frame and not args.image_condition:
        sys.exit("--last-frame keeps the last frame in the image condition: give --image-condition too")
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
                    MANIFEST if single else f"manifest.rank{args.rank}-of-{args.world_size}.json")
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
    for n, (item_id, path, caption, extras) in enumerate(mine, 1):
        sources = [path, extras.get("control"), extras.get("mask"), *extras.get("references", [])]
        source = " ".join(source_fingerprint(p) for p in sources if p) if path else caption_hash(caption)
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
                unfit.append(f"{item_id}: {bucket_that_takes(frames, buckets, args.fps)}")
                continue
            video = fit(frames, bucket)
            if args.control:
                try:
                    tensors, references = control_sample(encoders, video, extras, bucket, args.fps)
                except ValueError as e:
                    unfit.append(f"{item_id}: {e}")
                    continue
            else:
                tensors, references = {"latents": encoders.latents(video)}, 0
            latents = tensors["latents"]
            fields = {name: folder.store(f"{name}/{item_id}", t) for name, t in tensors.items()}
            if args.image_condition:
                fields["image_condition"] = folder.store(f"image_condition/{item_id}",
                                                         encoders.image_condition(video, args.last_frame))
            sample = {"id": item_id, "bucket": "x".join(map(str, latents.shape[1:])),
                      "caption_hash": caption_hash(caption), "source_fingerprint": source,
                      "fields": {**fields, **text_fields(caption)}}
            if args.control:
                sample["reference_frames"] = references  # the latent frames before the video's
            encoded += 1
        kept_shards.update(t["shard"] for t in sample["fields"].values())
        folder.add(sample)
        if n % 50 == 0 or n == len(mine):
            log(f"rank {args.rank}: {n}/{len(mine)} items ({time.monotonic() - started:.0f} s)")
    if encoded + text_only + reused == 0 and mine:
        for line in unfit:
            log(f"not encoded: {line}")
        sys.exit(f"encode_dataset.py: none of the {len(mine)} item(s) fit a bucket of --buckets {args.buckets}: the data "
                 f"set would be empty, so no manifest was written. Add the buckets named above to --buckets (frames "
                 f"4k+1 at --fps {args.fps:g}, sizes multiples of {2 * encoders.spatial}), or give longer clips")
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
    if encoders.cut_captions:
        log(f"rank {args.rank}: {encoders.cut_captions} caption(s) longer than --text-len {args.text_len} tokens were "
            f"cut to {args.text_len}, as the model reads them (its model.text_len; Wan's is 512)")
    if args.world_size > 1:
        done = [args.out / f"manifest.rank{r}-of-{args.world_size}.json" for r in range(args.world_size)]
        if all(p.exists() for p in done):
            lock = args.out / ".merge.lock"
            try:
                os.close(os.open(lock, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return 0
            merge(args.out, args.world_size, [item[0] for item in items])
            lock.unlink()
    # Shards no sample uses any more (their items were re-encoded) are removed.
    final = json.loads((args.out / MANIFEST).read_text()) if (args.out / MANIFEST).exists() else None
    if final and args.world_size == 1:
        listed = {s["file"] for s in final["shards"]}
        for stale in (args.out / "shards").glob("*.safetensors"):
            if f"shards/{stale.name}" not in listed:
                stale.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
