#!/usr/bin/env python3
"""Benchmark: decoding latents to video with wanfw's Wan VAE against diffusers' AutoencoderKLWan.

    .venv/bin/python bench/vae_decode.py [--vae wan2.1|wan2.2] [--frames 3] [--size 16x16 | --video-size 480x832]
                                         [--device cpu|cuda] [--dtype float32|bfloat16]

One VAE of the released dimensions with random weights (they time like real ones), saved as a
diffusers vae/ folder; the same latents [1, z, T, h, w] decoded by `wanfw decode` and by diffusers
(no tiling, `torch.no_grad`), each in a process of its own, one after the other on this machine.
Time: the decode alone, the frames back on the CPU as float32 on both sides (wanfw's log line;
diffusers' timed around `vae.decode` and the copy), the best of --repeat runs.
Memory on the CPU: each process's peak resident set (ru_maxrss, the median of the runs), and what
decoding adds to it: the same process decoding one latent pixel of one frame instead (the weights
loaded, the activations next to nothing). On a GPU: the caching allocator's peak of tensor memory
during the decode above what the loaded decoder holds (torch.cuda.max_memory_allocated on both
sides). Beside both, the causal cache both keep between latent frames (diffusers' after decoding),
a floor under what decoding adds. The outputs are compared too.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]
WANFW = ROOT / "build" / "bin" / "wanfw"
CONFIGS = {
    "wan2.1": {},
    "wan2.2": dict(base_dim=160, decoder_base_dim=256, z_dim=48, is_residual=True, in_channels=12, out_channels=12,
                   patch_size=2, scale_factor_spatial=16, latents_mean=[0.0] * 48, latents_std=[1.0] * 48),
}

DIFFUSERS = textwrap.dedent("""
    import sys, time, torch
    from diffusers import AutoencoderKLWan
    from safetensors.torch import load_file, save_file
    torch.set_grad_enabled(False)
    device, dtype = sys.argv[4], getattr(torch, sys.argv[5])
    gpu = device.startswith("cuda")
    vae = AutoencoderKLWan.from_pretrained(sys.argv[1]).eval().to(device, dtype)
    z = load_file(sys.argv[2])["raw"].to(device, dtype)
    cached = [0]
    clear = vae.clear_cache
    def measure_then_clear():  # the causal cache as decoding leaves it: each conv's last 2 input frames
        held = getattr(vae, "_feat_map", None) or []
        cached[0] = max(cached[0], sum(t.numel() * t.element_size() for t in held if isinstance(t, torch.Tensor)))
        clear()
    vae.clear_cache = measure_then_clear
    if gpu:
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    video = vae.decode(z).sample.float().cpu()
    print(f"seconds {time.perf_counter() - started:.4f}")
    if gpu:
        print(f"gpu held {held / 2**20:.0f} peak {torch.cuda.max_memory_allocated() / 2**20:.0f}")
    print(f"cache {cached[0]}")
    save_file({"video": video.contiguous()}, sys.argv[3])
""")


def measured(command, env=None):
    """(stdout + stderr, peak resident MiB) of one process."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               env=env)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"{command[0]} failed:\n{output[-3000:]}")
    return output, usage.ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vae", choices=sorted(CONFIGS), default="wan2.1")
    parser.add_argument("--frames", type=int, default=3, help="latent frames")
    parser.add_argument("--size", default="16x16", help="latent height x width")
    parser.add_argument("--video-size", help="video height x width instead (480x832: 81 frames of a real clip "
                                             "with --frames 21)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    from diffusers import AutoencoderKLWan
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        torch.manual_seed(0)
        vae = AutoencoderKLWan(**CONFIGS[args.vae])
        vae.save_pretrained(tmp / "vae")
        c = vae.config
        del vae
        s = c.scale_factor_spatial
        if args.video_size:
            h, w = (int(v) // s for v in args.video_size.split("x"))
        else:
            h, w = map(int, args.size.split("x"))
        latents = torch.randn(1, c.z_dim, args.frames, h, w)
        raw = latents * torch.tensor(c.latents_std).view(1, -1, 1, 1, 1) + torch.tensor(c.latents_mean).view(1, -1, 1, 1, 1)
        save_file({"latents": latents, "raw": raw}, tmp / "latents.safetensors")
        save_file({"latents": latents[:, :, :1, :1, :1].contiguous(), "raw": raw[:, :, :1, :1, :1].contiguous()},
                  tmp / "pixel.safetensors")
        (tmp / "config.yaml").write_text(f"model:\n  name: wan22_flow_matching\n  preset: tiny\n  vae: {tmp / 'vae'}\n"
                                         f"  vae_dtype: {args.dtype}\n")
        env = {**os.environ, "OMP_NUM_THREADS": str(os.cpu_count())}
        def wanfw_cmd(inputs, out):
            return [str(WANFW), "decode", str(tmp / "config.yaml"), "--inputs", str(tmp / inputs), "--out",
                    str(tmp / out), "--device", args.device]

        def diffusers_cmd(inputs, out):
            return [sys.executable, "-c", DIFFUSERS, str(tmp / "vae"), str(tmp / inputs), str(tmp / out), args.device,
                    args.dtype]

        results = {}
        sides = (("wanfw", wanfw_cmd, r"in ([\d.]+) s", r"holds (\d+) MiB; decoding peaked at (\d+) MiB"),
                 ("diffusers", diffusers_cmd, r"seconds ([\d.]+)", r"gpu held (\d+) peak (\d+)"))
        for name, command, seconds, gpu_memory in sides:
            runs = [measured(command("latents.safetensors", f"{name}.safetensors"), env) for _ in range(args.repeat)]
            best = min(float(re.search(seconds, out).group(1)) for out, _ in runs)
            if gpu:  # tensor memory on the device: the peak above the loaded decoder
                held, peak = (statistics.median(float(re.search(gpu_memory, out).group(i)) for out, _ in runs)
                              for i in (1, 2))
                results[name] = (best, peak, peak - held)
                where = f"GPU peak {peak:8.0f} MiB (decoder {held:.0f})"
            else:
                loaded = statistics.median(measured(command("pixel.safetensors", "pixel_out.safetensors"), env)[1]
                                           for _ in range(args.repeat))
                peak = statistics.median(p for _, p in runs)
                results[name] = (best, peak, peak - loaded)
                where = f"peak RSS {peak:8.0f} MiB"
            if name == "diffusers":
                cache_mib = int(re.search(r"cache (\d+)", runs[0][0]).group(1)) / 2**20
            print(f"{name:10} decode {best:8.2f} s   {where}   decoding adds {results[name][2]:8.0f} MiB", flush=True)
        a = load_file(tmp / "wanfw.safetensors")["video"]
        b = load_file(tmp / "diffusers.safetensors")["video"]
        frames = 1 + 4 * (args.frames - 1)
        device = torch.cuda.get_device_name() if gpu else "the CPU"
        print(f"\n{args.vae} VAE, {frames} frames at {h * s}x{w * s}, {args.dtype} on {device}; "
              f"outputs {tuple(a.shape)}, |wanfw - diffusers| max {(a - b).abs().max().item():.2e} "
              f"mean {(a - b).abs().mean().item():.2e}")
        added = (f"{results['wanfw'][2] / results['diffusers'][2]:.2f}x" if results['diffusers'][2] > 1
                 else "- (loading peaks above decoding at this size)")
        print(f"wanfw / diffusers: time {results['wanfw'][0] / results['diffusers'][0]:.2f}x, "
              f"memory decoding adds {added} (peak {'GPU memory' if gpu else 'RSS'} "
              f"{results['wanfw'][1] / results['diffusers'][1]:.2f}x)")
        # Both decoders keep the same causal cache (2 input frames of every causal conv) from one
        # latent frame to the next: a floor under what any untiled decode adds.
        print(f"the causal cache: {cache_mib:.0f} MiB, {cache_mib / max(results['diffusers'][2], 1):.2f}x of what "
              f"decoding adds to diffusers; wanfw adds {results['wanfw'][2] - cache_mib:.0f} MiB beside it, "
              f"diffusers {results['diffusers'][2] - cache_mib:.0f} MiB")


if __name__ == "__main__":
    main()
