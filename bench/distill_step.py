#!/usr/bin/env python3
"""Benchmark: what a distillation step costs against training the student alone and against
training teacher and student both.

    .venv/bin/python bench/distill_step.py [--steps 12] [--device cpu]

Three kinds of run of the same sizes, one after the other on this machine (median step time from
the metrics' step timing, peak memory from each run's summary):
  1. the student alone: wan22_flow_matching with the student's dimensions (fp32, AdamW);
  2. distillation: wan22_distill, the student as in 1 plus the frozen teacher in bfloat16 without
     gradients, guidance distilled (two teacher forwards a step);
  3. training both: the teacher trained as a model of its own (fp32, AdamW) and the student as in 1 —
     what a step that trained both would cost at least: the two runs' step times and the memory
     each adds above an idle process, summed.
A teacher of wider, deeper dimensions than the student (the point of distilling) so the costs
separate: teacher dim 384, 8 blocks; student dim 384, 4 blocks; latents [16, 5, 16, 16], batch 2.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WANFW = ROOT / "build" / "bin" / "wanfw"
DIMS = dict(dim=384, num_heads=4, ffn_dim=1536, in_dim=16, out_dim=16, text_dim=256, text_len=32)
TEACHER_LAYERS, STUDENT_LAYERS = 8, 4


def config(tmp: Path, name: str, model: dict, steps: int, device: str) -> Path:
    c = {"run": {"name": name, "output_dir": str(tmp / "runs"), "seed": 1},
         "model": model, "strategy": {"name": "single", "device": device},
         "data": {"num_samples": 64, "batch_size": 2, "workers": 1, "buckets": ["5x16x16"]},
         "optimizer": {"lr": 1e-4}, "trainer": {"max_steps": steps, "log_every": 1, "progress": "off"},
         "checkpoint": {"every": steps, "keep_last": 1}, "loggers": [{"name": "csv"}]}
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(c))
    return path


def run(path: Path):
    result = subprocess.run([str(WANFW), "run", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{path.name} failed:\n{result.stdout}\n{result.stderr}")
    out = result.stdout + result.stderr
    seconds = float(re.search(r"done: \d+ steps in ([\d.]+)(m?s)", out).group(1))
    peak = float(re.search(r"peak memory ([\d.]+) MiB", out).group(1))
    rate = float(re.search(r"\| ([\d.]+) samples/s \|", out).group(1))
    return rate, peak


def idle_memory() -> float:
    """Peak RSS of a process that loads LibTorch and the plugins and trains nothing (MiB)."""
    result = subprocess.run(["/usr/bin/time", "-f", "%M", str(WANFW), "plugins"], capture_output=True, text=True)
    return int(result.stderr.strip().splitlines()[-1]) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        fm = {"name": "wan22_flow_matching", "preset": "tiny", **DIMS}
        teacher_run = config(tmp, "teacher", {**fm, "num_layers": TEACHER_LAYERS}, args.steps, args.device)
        teacher_rate, teacher_peak = run(teacher_run)
        subprocess.run([str(WANFW), "export", str(teacher_run), "--checkpoint", str(tmp / "runs" / "teacher" / "version_0"),
                        "--out", str(tmp / "teacher")], check=True, capture_output=True)
        student_rate, student_peak = run(config(tmp, "student", {**fm, "num_layers": STUDENT_LAYERS}, args.steps,
                                                args.device))
        teacher_dims = {f"teacher_{k}": v for k, v in DIMS.items()}
        distill = {"name": "wan22_distill", "teacher_preset": "tiny", **teacher_dims, "teacher_num_layers": TEACHER_LAYERS,
                   "teacher_weights": str(tmp / "teacher"), "teacher_dtype": "bfloat16",
                   "student_num_layers": STUDENT_LAYERS, "guidance_scale": 3.0}
        distill_rate, distill_peak = run(config(tmp, "distill", distill, args.steps, args.device))
        idle = idle_memory()

    step = lambda rate: 2 / rate * 1000  # ms per step of batch 2
    both_ms = step(teacher_rate) + step(student_rate)
    both_peak = idle + (teacher_peak - idle) + (student_peak - idle)
    print(f"teacher dim {DIMS['dim']} x {TEACHER_LAYERS} blocks (bf16, frozen), student {STUDENT_LAYERS} blocks; "
          f"latents [16, 5, 16, 16], batch 2, {args.device}, {args.steps} steps each; idle process {idle:.0f} MiB")
    print(f"  student alone:       {step(student_rate):7.1f} ms/step, peak {student_peak:6.0f} MiB")
    print(f"  distillation:        {step(distill_rate):7.1f} ms/step, peak {distill_peak:6.0f} MiB "
          f"(teacher: 2 guided forwards, no gradients)")
    print(f"  training both (>=):  {both_ms:7.1f} ms/step, peak {both_peak:6.0f} MiB (teacher trained alone: "
          f"{step(teacher_rate):.1f} ms/step, {teacher_peak:.0f} MiB)")
    print(f"  distillation / student alone: time {step(distill_rate) / step(student_rate):.2f}x, memory above idle "
          f"{(distill_peak - idle) / (student_peak - idle):.2f}x")
    print(f"  distillation / training both: time {step(distill_rate) / both_ms:.2f}x, memory above idle "
          f"{(distill_peak - idle) / (both_peak - idle):.2f}x")


if __name__ == "__main__":
    main()
