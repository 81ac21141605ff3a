#!/usr/bin/env python3
"""Benchmark: what a DMD step costs (the generator's and the critic's) against a velocity-matching
step of the same networks, and what sharing one frozen base saves.

    .venv/bin/python bench/dmd_step.py [--steps 16] [--device cpu] [--rank 16]

Runs of one size, one after the other on this machine (median step time from metrics.csv's
step_time after the first cycle, split by training phase; peak memory from each run's summary):
  1. velocity matching: wan22_distill, objective velocity, the student a copy of the teacher, guided
     target (two teacher forwards a step), every student weight trained;
  2. dmd, separate networks, every weight trained: the frozen teacher, the generator and the critic;
  3. dmd, separate networks with adapters (rank R on generator and critic, each over its own frozen
     copy of the base);
  4. dmd, one shared base: the same adapters on one frozen copy, which is also the real score.
Teacher = generator = critic architecture (the published DMD recipes): dim 384, 4 blocks, latents
[16, 5, 16, 16], batch 2; 3 generator steps, 2 critic steps per generator step, data-free.
"""
import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench_runs import WANFW, experiment, idle_memory, run

DIMS = dict(dim=384, num_heads=4, ffn_dim=1536, in_dim=16, out_dim=16, text_dim=256, text_len=32, num_layers=4)


def phase_times(folder: Path, skip: int):
    """Median ms of the generator's and of the critic's steps after the first `skip` steps."""
    rows = (folder / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    out = {}
    for phase in ("generator", "critic"):
        column = header.index(f"{phase}/loss")
        times = [float(r.split(",")[header.index("step_time")]) * 1000 for r in rows[1 + skip:]
                 if r.split(",")[column]]
        out[phase] = statistics.median(times)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        teacher_run = experiment(tmp, "teacher", {"name": "wan22_flow_matching", "preset": "tiny", **DIMS}, 1,
                                 args.device)
        run(teacher_run, skip=0)
        subprocess.run([str(WANFW), "export", str(teacher_run), "--checkpoint", str(tmp / "runs" / "teacher" / "version_0"),
                        "--out", str(tmp / "teacher")], check=True, capture_output=True)
        base_mib = (tmp / "teacher" / "diffusion_pytorch_model.safetensors").stat().st_size / 2**20
        base = {"name": "wan22_distill", "teacher_preset": "tiny", **{f"teacher_{k}": v for k, v in DIMS.items()},
                "teacher_weights": str(tmp / "teacher")}
        velocity = {**base, "guidance_scale": 3.0}
        dmd = {**base, "objective": "dmd", "inputs": "generator", "latent_size": "5x16x16", "generator_steps": 3,
               "real_guidance": 3.0, "critic_updates_per_generator_update": 2}
        adapters = {"lora": {"rank": args.rank}, "critic_lora": {"rank": args.rank}}
        runs = {"velocity matching": velocity, "dmd, separate, full": dmd,
                f"dmd, separate, rank-{args.rank} adapters": {**dmd, **adapters},
                f"dmd, one shared base, rank-{args.rank} adapters": {**dmd, **adapters, "shared_base": True}}
        results = {}
        for label, model in runs.items():
            name = label.replace(" ", "_").replace(",", "")
            ms, peak, folder, _ = run(experiment(tmp, name, model, args.steps, args.device), skip=3)
            results[label] = (ms, peak, None if label == "velocity matching" else phase_times(folder, 3))
        idle = idle_memory(args.device)

    print(f"teacher = generator = critic: dim {DIMS['dim']}, {DIMS['num_layers']} blocks; latents [16, 5, 16, 16], "
          f"batch 2, {args.device}, {args.steps} steps each; idle process {idle:.0f} MiB")
    v_ms, v_peak, _ = results["velocity matching"]
    for label, (ms, peak, phases) in results.items():
        split = "" if phases is None else (f" (generator step {phases['generator']:.1f} ms = "
                                           f"{phases['generator'] / v_ms:.2f}x, critic step {phases['critic']:.1f} ms = "
                                           f"{phases['critic'] / v_ms:.2f}x)")
        print(f"  {label:42s} {ms:7.1f} ms/step median{split}; peak {peak:6.0f} MiB, above idle "
              f"{(peak - idle) / (v_peak - idle):.2f}x velocity matching's")
    separate = results[f"dmd, separate, rank-{args.rank} adapters"][1]
    shared = results[f"dmd, one shared base, rank-{args.rank} adapters"][1]
    print(f"  one shared base holds {separate - shared:.0f} MiB less than separate copies: "
          f"{(separate - shared) / base_mib:.2f} copies of the {base_mib:.0f} MiB fp32 base (two expected)")


if __name__ == "__main__":
    main()
