#!/usr/bin/env python3
"""Benchmark: a LoRA step with each low-memory option against the same step without it.

    .venv/bin/python bench/low_memory_step.py                      # the CPU: the machinery's own cost
    python3 bench/low_memory_step.py --size 5b --device cuda        # TI2V-5B on a GPU

One DiT trained one variant after the other on this machine, adapters of --rank on every block
Linear, gradient checkpointing on: the base in the compute dtype; in fp8 (model.base_dtype); with
the checkpointed activations in host memory (model.activation_offload); with half the blocks
streamed from host memory (block_swap, ring 2), pinned and pageable (staged through pinned
buffers on a GPU); and with all three. Sizes: --size small (CPU: dim
256, 8 blocks, latents [16, 5, 16, 16], batch 2, fp32); --size 5b (Wan2.2 TI2V-5B, ti2v, 81 frames
at 480x832: latents [48, 21, 30, 52], 8,190 tokens, batch 1, bf16 autocast over a bf16 base; random
weights, which time like real ones). For each: the median step time after two warm-up steps, the
peak memory (the CPU: the process's resident peak; a GPU: the caching allocator's peak allocation,
and the reserved peak of the first step beside the memory plan's prediction), and with block swap
the copies a step and the time the compute waited for them. Ratios are to the first variant.
--check (--size small) first trains every weight of the DiT for two steps and exports it, so that
the variants start from weights whose head is not zero (the official initialisation's zero head
passes adapters no gradient), then compares every variant's trained adapters with the first
variant's: bitwise on the CPU; on a GPU the largest difference is printed.
"""
import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

import torch
from bench_runs import WANFW, experiment, run
from safetensors.torch import load_file

SIZES = {
    "small": (dict(preset="tiny", dim=256, num_heads=4, ffn_dim=1024, num_layers=8, in_dim=16, out_dim=16,
                   text_dim=256, text_len=32), "5x16x16", 2, "fp32", "float32"),
    "5b": (dict(preset="wan2.2-ti2v-5b", task="ti2v", text_len=512), "21x30x52", 1, "bf16", "bfloat16"),
}


def variants(layers: int):
    half = layers // 2
    return [("checkpointed", {}, {}),
            ("fp8 base", {"base_dtype": "float8_e4m3fn"}, {}),
            ("activation offload", {"activation_offload": True}, {}),
            (f"block swap {half}", {}, {"blocks": half, "ring": 2}),
            (f"block swap {half}, pageable", {}, {"blocks": half, "ring": 2, "host_memory": "pageable"}),
            (f"all three ({half} swapped)", {"base_dtype": "float8_e4m3fn", "activation_offload": True},
             {"blocks": half, "ring": 2})]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--only", help="run only the variants whose names start with this (no ratios then)")
    args = parser.parse_args()
    dims, bucket, batch, precision, dtype = SIZES[args.size]
    layers = dims.get("num_layers", 30)
    rows, adapters = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        weights = {}
        if args.check:
            base = experiment(tmp, "base", {"name": "wan22_flow_matching", **dims}, 2, args.device, bucket, batch)
            c = json.loads(base.read_text())
            c["optimizer"]["lr"] = 1e-2
            base.write_text(json.dumps(c))
            _, _, folder, _ = run(base, skip=0)
            subprocess.run([str(WANFW), "export", str(base), "--checkpoint", str(folder), "--out", str(tmp / "weights")],
                           check=True, capture_output=True)
            weights = {"weights": str(tmp / "weights")}
        for i, (name, model, swap) in enumerate(variants(layers)):
            if args.only and not name.startswith(args.only):
                continue
            config = experiment(tmp, f"v{i}", {"name": "wan22_flow_matching", **dims, "dtype": dtype,
                                               "gradient_checkpointing": True, **weights,
                                               "lora": {"rank": args.rank, "alpha": args.rank}, **model},
                                args.steps, args.device, bucket, batch, precision)
            if swap:
                c = json.loads(config.read_text())
                c["block_swap"] = swap
                config.write_text(json.dumps(c))
            ms, peak, folder, output = run(config)
            plan = re.search(r"the plan predicted ([\d.]+) GiB a GPU; the first step reserved ([\d.]+) GiB", output)
            stall = re.search(r"\(([\d.]+) a step, [\d.]+ MiB each\), the compute waited ([\d.]+) ms a step", output)
            rows.append((name, ms, peak, plan.groups() if plan else None, stall.groups() if stall else None))
            checkpoint = sorted((folder / "checkpoints").iterdir())[-1]
            adapters[name] = load_file(checkpoint / "model.safetensors")
            print(f"{name}: {ms:.1f} ms/step, peak {peak:.0f} MiB"
                  + (f", plan {plan.group(1)} GiB vs reserved {plan.group(2)} GiB" if plan else "")
                  + (f", {stall.group(1)} copies/step, stall {stall.group(2)} ms/step" if stall else ""), flush=True)
    base_ms, base_peak = rows[0][1], rows[0][2]
    print(f"\n{args.size} on {args.device}, LoRA rank {args.rank}, {args.steps} steps (median after 2):")
    print(f"{'variant':32} {'ms/step':>9} {'x time':>7} {'peak MiB':>9} {'x mem':>6} {'plan/reserved GiB':>18} "
          f"{'copies':>7} {'stall ms':>8}")
    for name, ms, peak, plan, stall in rows:
        print(f"{name:32} {ms:9.1f} {ms / base_ms:7.2f} {peak:9.0f} {peak / base_peak:6.2f} "
              f"{(plan[0] + '/' + plan[1]) if plan else '-':>18} {stall[0] if stall else '-':>7} "
              f"{stall[1] if stall else '-':>8}")
    if args.check:
        first = adapters[rows[0][0]]
        for name, tensors in adapters.items():
            worst = max((first[k].float() - tensors[k].float()).abs().max().item() for k in first)
            same = all(torch.equal(first[k], tensors[k]) for k in first)
            print(f"check {name}: {'bitwise equal' if same else f'largest difference {worst:.3g}'} to {rows[0][0]}")


if __name__ == "__main__":
    main()
