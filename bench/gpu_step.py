#!/usr/bin/env python3
"""Benchmark: one Wan DiT training step (forward, backward, AdamW) in wanfw and in Python with
diffusers' WanTransformer3DModel, eager and torch.compile'd, on the same device and torch.

    .venv/bin/python bench/gpu_step.py --shape 1.3b          # on a GPU: Wan 1.3B, 480p x 81 frames
    .venv/bin/python bench/gpu_step.py --shape 5b-lora       # TI2V-5B, LoRA rank 32, 704x1280x121
    .venv/bin/python bench/gpu_step.py --shape tiny --device cpu --steps 4   # the script itself, on a CPU

Shapes (batch 1, patches 1x2x2):
  1.3b     Wan2.1 T2V-1.3B (dim 1536, 30 blocks), latents 21x60x104 = 32,760 tokens, text 512 tokens;
           full fine-tune: wanfw precision bf16_weights (bf16 weights, fp32 masters), Python bf16
           autocast over fp32 weights (what diffusers' and accelerate's mixed precision do) with
           AdamW(fused=True)
  5b-lora  Wan2.2 TI2V-5B (dim 3072, 30 blocks, 48 channels), latents 31x44x80 = 27,280 tokens;
           LoRA rank 32 on the attention projections and feed-forward layers over a bf16 base,
           gradient checkpointing on both sides, bf16 autocast
  tiny     dim 256, 4 blocks, 5x16x16: checks the script end to end where there is no GPU

Model FLOPs per step (the MFU numerator; recomputation under checkpointing not counted):
  matmuls    (2 forward + 2 input gradient + 2 x trained share weight gradient) x params x tokens
  attention  3 x (self: 4 x tokens^2 x dim + cross: 4 x tokens x text x dim) x blocks
MFU = model FLOPs / step time / the device's dense bf16 peak (--peak-tflops; H100/H200 SXM: 989).

Each side runs in a fresh process after --warmup steps; the figure is the median of --steps steps.
Peak memory: the CUDA caching allocator's peak on a GPU (wanfw's summary line, Python's
torch.cuda.max_memory_allocated), resident memory on a CPU. Ratios are wanfw / Python.
"""
import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_runs import WANFW, run

SHAPES = {
    "1.3b": dict(preset="wan2.1-t2v-1.3b", dims=dict(dim=1536, num_heads=12, ffn_dim=8960, num_layers=30, in_dim=16,
                                                      out_dim=16, text_dim=4096, text_len=512),
                 latent=(21, 60, 104), lora=0, checkpointing=False),
    "5b-lora": dict(preset="wan2.2-ti2v-5b", dims=dict(dim=3072, num_heads=24, ffn_dim=14336, num_layers=30, in_dim=48,
                                                        out_dim=48, text_dim=4096, text_len=512),
                    latent=(31, 44, 80), lora=32, checkpointing=True),
    "tiny": dict(preset="tiny", dims=dict(dim=256, num_heads=4, ffn_dim=1024, num_layers=4, in_dim=16, out_dim=16,
                                          text_dim=256, text_len=32),
                 latent=(5, 16, 16), lora=0, checkpointing=False),
}

PYTHON_STEP = r"""
import json, resource, sys, time, torch, diffusers
shape, device, steps, warmup, compiled = json.loads(sys.argv[1])  # shape["diffusers"]: diffusers_config
d, (F, H, W) = shape["dims"], shape["latent"]
torch.manual_seed(0)
lora = shape["lora"] > 0
with torch.device(device):
    model = diffusers.WanTransformer3DModel(**shape["diffusers"])
if lora:
    import peft
    model = model.to(torch.bfloat16)
    model.requires_grad_(False)
    model.add_adapter(peft.LoraConfig(r=shape["lora"], lora_alpha=shape["lora"], init_lora_weights=True,
                                      target_modules=["to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2"]))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
if shape["checkpointing"]:
    model.enable_gradient_checkpointing()
model.train()
trained = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(trained, lr=1e-4, weight_decay=0.01, fused=device.startswith("cuda"))
forward = torch.compile(model) if compiled else model
cuda = device.startswith("cuda")
times = []
for step in range(warmup + steps):
    x0 = torch.randn(1, d["out_dim"], F, H, W, device=device)
    context = torch.randn(1, d["text_len"], d["text_dim"], device=device)
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    noise = torch.randn_like(x0)
    sigma = torch.rand(1, device=device)
    s = sigma.view(-1, 1, 1, 1, 1)
    with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
        prediction = forward((1 - s) * x0 + s * noise, sigma * 1000, context).sample
    loss = torch.nn.functional.mse_loss(prediction.float(), (noise - x0).float())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trained, 1.0)
    optimizer.step()
    loss.item()
    if step >= warmup:
        times.append(time.perf_counter() - start)
peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"ms": sorted(times)[len(times) // 2] * 1000, "peak_mib": peak,
                  "params": sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n),
                  "trained": sum(p.numel() for p in trained)}))
"""


def diffusers_config(shape):
    """The WanTransformer3DModel arguments of the shape's model (both Python sides build it so)."""
    d = shape["dims"]
    return dict(patch_size=(1, 2, 2), num_attention_heads=d["num_heads"], attention_head_dim=d["dim"] // d["num_heads"],
                in_channels=d["in_dim"], out_channels=d["out_dim"], text_dim=d["text_dim"], freq_dim=256,
                ffn_dim=d["ffn_dim"], num_layers=d["num_layers"], cross_attn_norm=True,
                qk_norm="rms_norm_across_heads", eps=1e-6)


def parameter_counts(shape):
    """(base parameters, trained parameters) of the shape's model, built on the meta device (nothing
    allocated): what the Python side reports when it runs."""
    import diffusers
    import torch
    d = shape["dims"]
    with torch.device("meta"):
        model = diffusers.WanTransformer3DModel(**diffusers_config(shape))
    params = sum(p.numel() for p in model.parameters())
    r = shape["lora"]
    # LoRA: r x (in + out) for each block's 8 attention projections (dim x dim) and 2 feed-forward layers.
    lora = d["num_layers"] * r * (8 * 2 * d["dim"] + 2 * (d["dim"] + d["ffn_dim"]))
    return params, lora if r else params


def model_flops(shape, params, trained):
    """Model FLOPs of one training step (docstring)."""
    d, (f, h, w) = shape["dims"], shape["latent"]
    tokens = f * (h // 2) * (w // 2)
    matmuls = (4 + 2 * trained / params) * params * tokens
    attention = 3 * (4 * tokens ** 2 * d["dim"] + 4 * tokens * d["text_len"] * d["dim"]) * d["num_layers"]
    return matmuls + attention, tokens


def wanfw_step(shape, args, tmp: Path):
    f, h, w = shape["latent"]
    model = {"name": "wan22_flow_matching", "preset": shape["preset"], "text_len": shape["dims"]["text_len"],
             "gradient_checkpointing": shape["checkpointing"]}
    if shape["preset"] == "tiny":
        model.update(shape["dims"])
    if shape["lora"]:
        model.update({"lora": {"rank": shape["lora"]}, "dtype": "bfloat16"})
    model["attention"] = args.attention
    precision = "bf16" if shape["lora"] else "bf16_weights"
    config = {"run": {"name": "wanfw", "output_dir": str(tmp / "runs"), "seed": 0}, "model": model,
              "strategy": {"name": "single", "device": args.device},
              "data": {"num_samples": 2 * (args.steps + args.warmup), "batch_size": 1, "workers": 1,
                       "buckets": [f"{f}x{h}x{w}"]},
              "precision": {"mode": precision}, "optimizer": {"lr": 1e-4, "weight_decay": 0.01},
              "scheduler": {"decay": "constant"},
              "trainer": {"max_steps": args.steps + args.warmup, "log_every": 1, "grad_clip": 1.0, "progress": "off",
                          "profile_steps": args.profile,
                          "profile_from": args.warmup + args.steps - args.profile + 1},  # the last steps
              "checkpoint": {"every": 0, "keep_last": 1}, "loggers": [{"name": "csv"}]}
    path = tmp / "wanfw.json"
    path.write_text(json.dumps(config))
    ms, peak, folder, output = run(path, skip=args.warmup)
    kernel = [line.split("attention: ")[1] for line in output.splitlines() if "attention: SDPA runs" in line]
    trace = folder / "profile" / "trace-rank0.json"
    if args.profile and args.trace_out and trace.exists():
        with open(trace, "rb") as source, gzip.open(args.trace_out, "wb") as target:
            shutil.copyfileobj(source, target)
    if args.profile:
        for line in output.splitlines():
            if "] profile" in line or (" ms " in line and " calls " in line):
                print("  " + line.split("] ", 1)[-1])
    return ms, peak, kernel


def python_step(shape, args, compiled: bool):
    described = {**shape, "diffusers": diffusers_config(shape)}
    arguments = json.dumps([described, args.device, args.steps, args.warmup, compiled])
    command = [sys.executable, "-c", PYTHON_STEP, arguments]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:  # reported, and the other sides still run (an out-of-memory is a figure too)
        error = [line for line in result.stderr.splitlines() if "Error" in line][-1:] or result.stderr[-400:]
        print(f"  python ({'compiled' if compiled else 'eager'}) failed: {error}")
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1.3b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the device's dense bf16 peak")
    parser.add_argument("--attention", default="auto", choices=["auto", "flash", "efficient", "cudnn", "math"],
                        help="wanfw's model.attention (ATen's choice per call, or one kernel)")
    parser.add_argument("--sides", default="wanfw,eager,compiled",
                        help="which of wanfw, eager and compiled to run (comma-separated)")
    parser.add_argument("--profile", type=int, default=0, help="wanfw: profile this many steps after the warm-up and "
                        "print the kernels that took the most time (trainer.profile_steps)")
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing on every side, "
                        "whatever the shape says (1.3b: diffusers eager does not fit 141 GB without it)")
    parser.add_argument("--trace-out", help="keep the profile's trace here (gzip'd Chrome trace JSON)")
    args = parser.parse_args()
    if not WANFW.exists():
        sys.exit(f"{WANFW} is missing: build wanfw first (scripts/setup.sh)")
    shape = SHAPES[args.shape]
    if args.checkpointing:
        shape = {**shape, "checkpointing": True}
    sides = args.sides.split(",")
    results = {}  # side: (ms, peak MiB)
    if "wanfw" in sides:
        with tempfile.TemporaryDirectory() as t:
            ms, mib, kernels = wanfw_step(shape, args, Path(t))
        results["wanfw"] = (ms, mib)
        print(f"  wanfw: {ms:.1f} ms/step, peak {mib:.0f} MiB", flush=True)  # kept if a later side runs out of time
        print(f"  wanfw attention kernels (model.attention {args.attention}): {'; '.join(kernels) or 'not logged'}")
    counts = None
    for side, compiled in (("eager", False), ("compiled", True)):
        if side in sides:
            python = python_step(shape, args, compiled=compiled)
            if python is None:
                continue
            results[f"diffusers {'torch.compile' if compiled else 'eager'}"] = (python["ms"], python["peak_mib"])
            print(f"  diffusers {side}: {python['ms']:.1f} ms/step, peak {python['peak_mib']:.0f} MiB", flush=True)
            counts = (python["params"], python["trained"])
    params, trained = counts or parameter_counts(shape)
    flops, tokens = model_flops(shape, params, trained)
    peak = args.peak_tflops * 1e12
    print(f"Wan DiT step, shape {args.shape} ({tokens:,} tokens, {params / 1e6:,.1f}M parameters, "
          f"{trained / 1e6:,.1f}M trained), {args.device}, median of {args.steps} steps after {args.warmup}; "
          f"{flops / 1e12:.3g} TFLOP a step")
    for name, (ms, mib) in results.items():
        print(f"  {name:24s} {ms:9.1f} ms/step  {flops / (ms / 1000) / 1e12:8.3g} TFLOP/s  "
              f"MFU {flops / (ms / 1000) / peak * 100:6.3g}%  peak {mib:8.0f} MiB")
    ours = results.get("wanfw")
    for name in ("diffusers eager", "diffusers torch.compile"):
        if ours and name in results:
            print(f"  wanfw / {name.split()[1]}: time {ours[0] / results[name][0]:.3f}x, "
                  f"memory {ours[1] / results[name][1]:.3f}x")

if __name__ == "__main__":
    main()
