"""Benchmark: one training step (forward, backward, AdamW) of the same small Wan DiT in wanfw and
in Python with diffusers' WanTransformer3DModel — same torch, same thread count, run one after the
other in fresh processes. Prints both median step times, their ratio and each peak RSS.

    .venv/bin/python bench/wan_train_step.py [--threads 2] [--steps 12] [--rounds 3]

Each round runs wanfw, Python, Python, wanfw (so a machine that speeds up or slows down during the
round weighs on both sides alike) and gives the ratio of the two sides' median step times over
both of their runs. The figure is the median of the rounds' ratios, printed with their spread
(lowest to highest), so a gap smaller than the noise between rounds shows as such. Beside it, the
ratio of the sides' fastest quartiles of steps: what each step costs when nothing else on the
machine gets in its way.

Target: wanfw <= 0.9x Python's step time and <= 0.6x its peak memory.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WANFW = ROOT / "build" / "bin" / "wanfw"
DIMS = dict(dim=256, num_heads=4, ffn_dim=1024, num_layers=4, in_dim=16, out_dim=16, text_dim=256)
LATENT = dict(frames=5, height=16, width=16, text_len=32)
BATCH = 2
WARMUP = 3

PYTHON_LOOP = r"""
import json, sys, time, resource, torch, diffusers
dims, latent, batch, steps, warmup = json.loads(sys.argv[1])
torch.manual_seed(0)
model = diffusers.WanTransformer3DModel(
    patch_size=(1, 2, 2), num_attention_heads=dims["num_heads"], attention_head_dim=dims["dim"] // dims["num_heads"],
    in_channels=dims["in_dim"], out_channels=dims["out_dim"], text_dim=dims["text_dim"], freq_dim=256,
    ffn_dim=dims["ffn_dim"], num_layers=dims["num_layers"], cross_attn_norm=True, qk_norm="rms_norm_across_heads")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
times = []
for step in range(steps):
    start = time.perf_counter()
    x0 = torch.randn(batch, dims["out_dim"], latent["frames"], latent["height"], latent["width"])
    context = torch.randn(batch, latent["text_len"], dims["text_dim"])
    noise = torch.randn_like(x0)
    sigma = torch.rand(batch)
    s = sigma.view(-1, 1, 1, 1, 1)
    prediction = model((1 - s) * x0 + s * noise, sigma * 1000, context).sample
    loss = torch.nn.functional.mse_loss(prediction.float(), (noise - x0).float())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    loss.item()
    times.append(time.perf_counter() - start)
print(json.dumps({"step_times": times[warmup:]}))
"""


def measure(command, env):
    """Runs `command` under GNU time; returns (stdout, peak RSS of that process in MiB)."""
    with tempfile.NamedTemporaryFile(mode="r") as rss:
        result = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, *command], capture_output=True,
                                text=True, env=env)
        if result.returncode != 0:
            sys.exit(f"{command[0]} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        return result.stdout, int(rss.read().split()[-1]) / 1024


def run_wanfw(env, steps):
    """One wanfw training run; returns (measured step times, peak RSS in MiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = {
            "run": {"name": "bench", "output_dir": tmp, "seed": 0},
            "model": {"name": "wan22_flow_matching", "preset": "tiny", **DIMS, "text_len": LATENT["text_len"]},
            "strategy": {"name": "single", "device": "cpu"},
            "data": {"num_samples": BATCH * steps, "batch_size": BATCH, "workers": 0, "shuffle": False,
                     "buckets": [f"{LATENT['frames']}x{LATENT['height']}x{LATENT['width']}"]},
            "optimizer": {"lr": 1e-4, "weight_decay": 0.01},
            "scheduler": {"decay": "constant"},
            "trainer": {"max_steps": steps, "log_every": 1, "grad_clip": 1.0, "progress": "off"},
            "checkpoint": {"every": 0, "keep_last": 1},
            "loggers": [{"name": "csv"}],
        }
        path = Path(tmp) / "bench.yaml"
        path.write_text(json.dumps(config))
        _, rss = measure([str(WANFW), "run", str(path)], env)
        with open(Path(tmp) / "bench" / "version_0" / "metrics.csv") as f:
            return [float(row["step_time"]) for row in csv.DictReader(f)][WARMUP:], rss


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    steps = args.steps + WARMUP

    rounds = []  # (wanfw steps, python steps, wanfw RSS, python RSS) of each round
    python_command = [sys.executable, "-c", PYTHON_LOOP, json.dumps([DIMS, LATENT, BATCH, steps, WARMUP])]
    for _ in range(args.rounds):
        wanfw_times, python_times, wanfw_rss, python_rss = [], [], 0.0, 0.0
        for side in ("wanfw", "python", "python", "wanfw"):
            if side == "wanfw":
                times, rss = run_wanfw(env, steps)
                wanfw_times += times
                wanfw_rss = max(wanfw_rss, rss)
            else:
                out, rss = measure(python_command, env)
                python_times += json.loads(out)["step_times"]
                python_rss = max(python_rss, rss)
        rounds.append((wanfw_times, python_times, wanfw_rss, python_rss))

    def fastest_quartile(times):
        return statistics.quantiles(times, n=4)[0]

    print(f"Wan DiT training step, dims {DIMS}, latents {LATENT}, batch {BATCH}, {args.threads} threads, "
          f"{args.rounds} rounds (wanfw, python, python, wanfw) of {args.steps} steps after {WARMUP} warm-up each")
    ratios, quartile_ratios = [], []
    for i, (w, p, wr, pr) in enumerate(rounds, 1):
        ratios.append(statistics.median(w) / statistics.median(p))
        quartile_ratios.append(fastest_quartile(w) / fastest_quartile(p))
        print(f"  round {i}: median step wanfw {statistics.median(w) * 1000:7.1f} ms, python "
              f"{statistics.median(p) * 1000:7.1f} ms, ratio {ratios[-1]:.3f}x (fastest quartile "
              f"{quartile_ratios[-1]:.3f}x); peak RSS {wr:7.1f} / {pr:7.1f} MiB")
    memory = max(r[2] for r in rounds) / max(r[3] for r in rounds)
    print(f"  ratio wanfw/python: step time {statistics.median(ratios):.3f}x (median of rounds; spread "
          f"{min(ratios):.3f}-{max(ratios):.3f}; fastest quartiles {statistics.median(quartile_ratios):.3f}x), "
          f"peak memory {memory:.3f}x")


if __name__ == "__main__":
    main()
