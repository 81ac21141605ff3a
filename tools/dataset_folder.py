"""encode_dataset.py's output: a data set folder written shard by shard (each atomically, the manifest
after each), the manifest a re-run starts from, and the merge of several ranks' manifests."""
import json
import os
import sys
import zlib
from pathlib import Path

# The format's name, version, manifest file and the keys of the manifest's objects, written once
# for C++ (a generated header) and here: every object this module puts in a manifest is checked
# against them, so that this writer and the C++ reader cannot name a key differently.
_FORMAT = json.loads((Path(__file__).resolve().parents[1] / "libs" / "latent_shards" / "dataset_format.json").read_text())
FORMAT, VERSION, MANIFEST = _FORMAT["format"], _FORMAT["version"], _FORMAT["manifest"]
KEYS = {kind: frozenset(keys) for kind, keys in _FORMAT["keys"].items()}


def checked(kind: str, entry: dict) -> dict:
    """`entry`, a manifest object of `kind` (manifest, shard, sample, tensor), once each of its keys
    is one dataset_format.json lists for that kind (a sample's fields are checked as tensors)."""
    unknown = set(entry) - KEYS[kind]
    if unknown:
        raise ValueError(f"a {kind} of the manifest has keys {sorted(unknown)} that dataset_format.json does not list "
                         f"(a {kind}'s keys: {sorted(KEYS[kind])})")
    if kind == "sample":
        for field in entry.get("fields", {}).values():
            checked("tensor", field)
    return entry


def log(message):
    print(f"[encode_dataset] {message}", flush=True)


class Folder:
    """A data set folder being written: shards filled and flushed atomically, the manifest after each."""

    def __init__(self, out: Path, prefix: str, shard_bytes: int, encoders: dict, fingerprint: str, manifest_name: str):
        self.out, self.prefix, self.shard_bytes, self.manifest_name = out, prefix, shard_bytes, manifest_name
        (out / "shards").mkdir(parents=True, exist_ok=True)
        self.manifest = checked("manifest", {"format": FORMAT, "version": VERSION, "encoders": encoders,
                                             "encoding_fingerprint": fingerprint, "empty_caption": {}, "shards": [],
                                             "samples": []})
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
        return checked("tensor", {"shard": self.shard, "tensor": name, "shape": list(tensor.shape)})

    def add(self, sample):
        self.manifest["samples"].append(checked("sample", sample))
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
            self.manifest["shards"].append(checked("shard", {"file": self.shard, "bytes": len(data),
                                                            "crc32": f"{zlib.crc32(data):08x}"}))
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
    path = out / MANIFEST
    if not path.exists():
        return None
    m = json.loads(path.read_text())
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        sys.exit(f"{path}: not a version {VERSION} wanfw data set; choose another output folder")
    return m


def merge(out: Path, world: int, order):
    """Joins the ranks' manifests into the one manifest (samples in source order)."""
    parts = [json.loads((out / f"manifest.rank{r}-of-{world}.json").read_text()) for r in range(world)]
    merged = dict(parts[0])
    shards = {s["file"]: s for p in parts for s in p["shards"]}  # reused shards appear in every part
    merged["shards"] = [shards[f] for f in sorted(shards)]
    position = {item_id: i for i, item_id in enumerate(order)}
    merged["samples"] = sorted((s for p in parts for s in p["samples"]), key=lambda s: position[s["id"]])
    write_json(out / MANIFEST, merged)
    for r in range(world):
        (out / f"manifest.rank{r}-of-{world}.json").unlink()
    log(f"merged {world} ranks: {len(merged['samples'])} samples in {len(merged['shards'])} shards")
