#!/usr/bin/env python3
"""Benchmark: a LoRA step against a full fine-tuning step of the same model.

    .venv/bin/python bench/lora_step.py [--steps 12] [--device cpu] [--rank 16]
    .venv/bin/python bench/lora_step.py --device cuda --size 1.3b --precision bf16

The same DiT (--size small: dim 512, 8 heads, ffn 2048, 8 blocks, latents [16, 5, 16, 16], batch 2;
--size 1.3b: the Wan 1.3B shape, dim 1536, 12 heads, ffn 8960, 30 blocks, text 4096 x 512, latents
[16, 5, 32, 32], batch 2), trained one after the other on this machine: every weight in float32 with
AdamW, then adapters of --rank on every attention projection and feed-forward layer over the frozen
float32 base, and over a frozen bfloat16 base; all under --precision (bf16: autocast). Median step
time from metrics.csv's step_time after two warm-up steps; peak memory from each run's summary (on
the CPU above an idle process that loads LibTorch and the plugins, on a GPU the caching allocator's
peak); trainable parameters from the runs' logs; checkpoint size from their last checkpoint.
"""
import argparse
import re
import tempfile
from pathlib import Path

from bench_runs import experiment, idle_memory, run

SIZES = {"small": (dict(dim=512, num_heads=8, ffn_dim=2048, num_layers=8, in_dim=16, out_dim=16, text_dim=256,
                        text_len=32), "5x16x16"),
         "1.3b": (dict(dim=1536, num_heads=12, ffn_dim=8960, num_layers=30, in_dim=16, out_dim=16, text_dim=4096,
                       text_len=512), "5x32x32")}


def measured(tmp: Path, name: str, model: dict, args):
    """(median ms per step, peak MiB, last checkpoint MiB, console output) of the DiT with `model` options."""
    dims, bucket = SIZES[args.size]
    ms, peak, folder, output = run(experiment(tmp, name, {"name": "wan22_flow_matching", "preset": "tiny", **dims,
                                                           **model}, args.steps, args.device, bucket,
                                              precision=args.precision))
    checkpoint = sorted((folder / "checkpoints").iterdir())[-1]
    return ms, peak, sum(f.stat().st_size for f in checkpoint.iterdir()) / 2**20, output


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        full = measured(tmp, "full", {}, args)
        lora = measured(tmp, "lora", {"lora": {"rank": args.rank}}, args)
        lora_bf16 = measured(tmp, "lora_bf16", {"lora": {"rank": args.rank}, "dtype": "bfloat16"}, args)
        idle = idle_memory(args.device)
    share = re.search(r"([\d,]+) trainable parameters, ([\d.]+)% of its weights", lora[3])
    dims, bucket = SIZES[args.size]
    print(f"DiT dim {dims['dim']}, {dims['num_layers']} blocks; latents [16, {bucket.replace('x', ', ')}], batch 2, "
          f"{args.device}, precision {args.precision}, {args.steps} steps each; idle process {idle:.0f} MiB")
    print(f"  LoRA rank {args.rank}: {share.group(1)} trainable parameters, {share.group(2)}% of the weights")
    print(f"  full fine-tune (fp32 weights): {full[0]:7.1f} ms/step, peak {full[1]:6.0f} MiB, checkpoint {full[2]:7.1f} MiB")
    for label, r in (("LoRA, fp32 base", lora), ("LoRA, bf16 base", lora_bf16)):
        print(f"  {label + ':':24s} {r[0]:7.1f} ms/step, peak {r[1]:6.0f} MiB, checkpoint {r[2]:7.1f} MiB; "
              f"/ full: time {r[0] / full[0]:.2f}x, memory above idle {(r[1] - idle) / (full[1] - idle):.2f}x, "
              f"checkpoint {r[2] / full[2]:.3f}x")


if __name__ == "__main__":
    main()
