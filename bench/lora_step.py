#!/usr/bin/env python3
"""Benchmark: a LoRA step against a full fine-tuning step of the same model.

    .venv/bin/python bench/lora_step.py [--steps 12] [--device cpu] [--rank 16]

The same DiT (dim 512, 8 heads, ffn 2048, 8 blocks; latents [16, 5, 16, 16], batch 2), trained one
after the other on this machine: every weight in float32 with AdamW, then adapters of --rank on
every attention projection and feed-forward layer over the frozen float32 base, and over a frozen
bfloat16 base. Median step time from metrics.csv's step_time after two warm-up steps; peak memory
from each run's summary (above an idle process that loads LibTorch and the plugins); trainable
parameters from the runs' logs; checkpoint size from their last checkpoint.
"""
import argparse
import re
import tempfile
from pathlib import Path

from bench_runs import experiment, idle_memory, run

DIMS = dict(dim=512, num_heads=8, ffn_dim=2048, num_layers=8, in_dim=16, out_dim=16, text_dim=256, text_len=32)


def measured(tmp: Path, name: str, model: dict, steps: int, device: str):
    """(median ms per step, peak MiB, last checkpoint MiB, console output) of the DiT with `model` options."""
    ms, peak, folder, output = run(experiment(tmp, name, {"name": "wan22_flow_matching", "preset": "tiny", **DIMS,
                                                           **model}, steps, device))
    checkpoint = sorted((folder / "checkpoints").iterdir())[-1]
    return ms, peak, sum(f.stat().st_size for f in checkpoint.iterdir()) / 2**20, output


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        full = measured(tmp, "full", {}, args.steps, args.device)
        lora = measured(tmp, "lora", {"lora": {"rank": args.rank}}, args.steps, args.device)
        lora_bf16 = measured(tmp, "lora_bf16", {"lora": {"rank": args.rank}, "dtype": "bfloat16"}, args.steps,
                             args.device)
        idle = idle_memory()
    share = re.search(r"([\d,]+) trainable parameters, ([\d.]+)% of its weights", lora[3])
    print(f"DiT dim {DIMS['dim']}, {DIMS['num_layers']} blocks; latents [16, 5, 16, 16], batch 2, {args.device}, "
          f"{args.steps} steps each; idle process {idle:.0f} MiB")
    print(f"  LoRA rank {args.rank}: {share.group(1)} trainable parameters, {share.group(2)}% of the weights")
    print(f"  full fine-tune (fp32):   {full[0]:7.1f} ms/step, peak {full[1]:6.0f} MiB, checkpoint {full[2]:7.1f} MiB")
    for label, r in (("LoRA, fp32 base", lora), ("LoRA, bf16 base", lora_bf16)):
        print(f"  {label + ':':24s} {r[0]:7.1f} ms/step, peak {r[1]:6.0f} MiB, checkpoint {r[2]:7.1f} MiB; "
              f"/ full: time {r[0] / full[0]:.2f}x, memory above idle {(r[1] - idle) / (full[1] - idle):.2f}x, "
              f"checkpoint {r[2] / full[2]:.3f}x")


if __name__ == "__main__":
    main()
