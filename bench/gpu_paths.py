#!/usr/bin/env python3
"""Every CUDA path of a wanfw training run, on the tiny quick-start Wan DiT, on one GPU: single in
fp32, bf16 autocast and bf16_weights; ddp and fsdp on one rank over NCCL (the real torchrun);
latent shards loaded through pinned host memory; the optimizer's state on the host (single, whose
last loss must stay within 5% of the device state's, and fsdp); and a resume that ends bitwise
where the uninterrupted run ends. Each path must train (its loss falls) and finish; a table of step time,
loss and peak GPU memory is printed last.

    python3 bench/gpu_paths.py [--steps 40]      # on a machine with a CUDA GPU and a wanfw build
"""
import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_runs import WANFW

# The quick start's model and data (examples/quickstart.yaml), a GPU strategy and a few steps.
MODEL = {"name": "wan22_flow_matching", "preset": "tiny", "dim": 96, "num_heads": 4, "ffn_dim": 256, "num_layers": 4,
         "task": "t2v", "timestep_sampling": "shift", "shift": 3.0, "text_len": 16}
PATTERNS = {"name": "synthetic", "content": "patterns", "num_samples": 512, "buckets": ["5x16x16"]}


def wanfw_run(tmp: Path, name: str, steps: int, strategy: dict, precision: str = "fp32", data: dict = PATTERNS,
              torchrun: bool = False, resume: bool = False, state: str = "device"):
    config = {"run": {"name": name, "output_dir": str(tmp), "seed": 42}, "model": MODEL, "strategy": strategy,
              "data": {**data, "batch_size": 4, "workers": 2}, "precision": {"mode": precision},
              "optimizer": {"lr": 2e-3, "weight_decay": 0.01, "state": state},
              "scheduler": {"warmup_steps": 5, "decay": "cosine"},
              "trainer": {"max_steps": steps, "log_every": 5, "grad_clip": 1.0, "progress": "lines"},
              "checkpoint": {"every": 10, "keep_last": 0}, "loggers": [{"name": "csv"}]}
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(config))
    command = [str(WANFW), "run", str(path)] + (["--resume", "auto"] if resume else [])
    if torchrun:
        command = [str(Path(sys.executable).parent / "torchrun"), "--no-python", "--nproc-per-node=1",
                   "--master-addr=127.0.0.1", "--master-port=29611", *command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return result, tmp / name / "version_0"


def summary(folder: Path):
    rows = (folder / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    values = [dict(zip(header, r.split(","))) for r in rows[1:]]
    losses = [float(v["loss"]) for v in values if v.get("loss")]
    times = sorted(float(v["step_time"]) for v in values[2:] if v.get("step_time"))
    return losses, (times[len(times) // 2] * 1000 if times else float("nan"))


def digest(checkpoint: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(checkpoint.glob("*.safetensors")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", default="cuda", help="cpu checks the script itself (Gloo for ddp and fsdp)")
    args = parser.parse_args()
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        data = tmp / "shards"
        synth = subprocess.run([str(WANFW), "data", "synth", str(data), "--samples", "64"], capture_output=True,
                               text=True)
        gpu = args.device.startswith("cuda")
        cuda = {"name": "single", "device": args.device}
        group = {"device": "cuda" if gpu else "cpu", "backend": "nccl" if gpu else "gloo"}
        shards = {"name": "latent_shards", "path": str(data)}
        ddp, fsdp = {"name": "ddp", **group}, {"name": "fsdp", **group}
        paths = {  # name: (strategy, precision, data, under torchrun, optimizer.state)
            "single fp32": (cuda, "fp32", PATTERNS, False, "device"),
            "single bf16 autocast": (cuda, "bf16", PATTERNS, False, "device"),
            "single bf16_weights": (cuda, "bf16_weights", PATTERNS, False, "device"),
            f"ddp 1 rank ({group['backend']})": (ddp, "fp32", PATTERNS, True, "device"),
            f"fsdp 1 rank ({group['backend']})": (fsdp, "fp32", PATTERNS, True, "device"),
            "latent shards, pinned": (cuda, "fp32", shards, False, "device"),
            # The optimizer's state in pinned host memory: each gradient's move on a copy stream.
            "single fp32, state on host": (cuda, "fp32", PATTERNS, False, "host"),
            "single bf16_weights, host": (cuda, "bf16_weights", PATTERNS, False, "host"),
            "fsdp 1 rank, state on host": (fsdp, "bf16", PATTERNS, True, "host"),
        }
        final = {}  # a path's last logged loss, to hold a host state's beside its device state's
        for name, (strategy, precision, data_set, torchrun, state) in paths.items():
            if "shards" in name and synth.returncode != 0:
                rows.append((name, "FAIL", synth.stderr.strip().splitlines()[-1:]))
                failed += 1
                continue
            folder_name = name.split()[0] + str(len(rows))
            result, folder = wanfw_run(tmp, folder_name, args.steps, strategy, precision, data_set, torchrun,
                                       state=state)
            output = result.stdout + result.stderr
            if result.returncode != 0:
                rows.append((name, "FAIL", output.strip().splitlines()[-3:]))
                failed += 1
                continue
            losses, ms = summary(folder)
            peak = [line.split("peak memory ")[1] for line in output.splitlines() if "peak memory " in line]
            falls = len(losses) > 2 and losses[-1] < losses[0]
            final[name] = losses[-1] if losses else float("nan")
            notes = [f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, {ms:.1f} ms/step, peak {peak[-1] if peak else '?'}"]
            # The host's AdamW (ATen's CPU kernel) rounds unlike the GPU's: the same run, not the same bits.
            twin = {"single fp32, state on host": "single fp32", "single bf16_weights, host": "single bf16_weights"}
            if name in twin and twin[name] in final:
                gap = abs(final[name] - final[twin[name]]) / max(abs(final[twin[name]]), 1e-12)
                notes.append(f"last loss {gap:.1%} from the device state's")
                falls = falls and gap < 0.05
            failed += not falls
            rows.append((name, "ok" if falls else "FAIL (loss did not fall, or strayed from the device state's)",
                         notes))
        # Resume: stop after step 10 (later checkpoints removed), continue to the end: the same bits.
        result, folder = wanfw_run(tmp, "resume", 20, cuda)
        whole = digest(folder / "checkpoints" / "step-00000020")
        shutil.rmtree(folder / "checkpoints" / "step-00000020")
        again, _ = wanfw_run(tmp, "resume", 20, cuda, resume=True)
        resumed = digest(folder / "checkpoints" / "step-00000020") if again.returncode == 0 else "failed"
        same = result.returncode == 0 and whole == resumed
        failed += not same
        rows.append(("resume at step 10, bitwise", "ok" if same else "FAIL",
                     [f"uninterrupted {whole}, resumed {resumed}"] + (again.stderr.strip().splitlines()[-2:]
                                                                      if again.returncode else [])))
    print(f"\n{args.device} paths of the tiny Wan DiT ({args.steps} steps each):")
    for name, verdict, notes in rows:
        print(f"  {name:28s} {verdict}: " + " | ".join(notes))
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
