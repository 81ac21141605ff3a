#!/usr/bin/env python3
"""Benchmark: what a distillation step costs against training the student alone and against
training teacher and student both.

    .venv/bin/python bench/distill_step.py [--steps 12] [--device cpu]

Three kinds of run of the same sizes, one after the other on this machine (median step time from
metrics.csv's step_time after two warm-up steps, peak memory from each run's summary):
  1. the student alone: wan22_flow_matching with the student's dimensions (fp32, AdamW);
  2. distillation: wan22_distill, the student as in 1 plus the frozen teacher in bfloat16 without
     gradients, guidance distilled (two teacher forwards a step); and the same with a float32 teacher;
  3. training both: the teacher trained as a model of its own (fp32, AdamW) and the student as in 1 —
     what a step that trained both would cost at least: the two runs' step times and the memory
     each adds above an idle process, summed.
A teacher of wider, deeper dimensions than the student (the point of distilling) so the costs
separate: teacher dim 384, 8 blocks; student dim 384, 4 blocks; latents [16, 5, 16, 16], batch 2.
"""
import argparse
import subprocess
import tempfile
from pathlib import Path

from bench_runs import WANFW, experiment, idle_memory, run

DIMS = dict(dim=384, num_heads=4, ffn_dim=1536, in_dim=16, out_dim=16, text_dim=256, text_len=32)
TEACHER_LAYERS, STUDENT_LAYERS = 8, 4


def timed(path: Path):
    """(median ms per step, peak MiB) of the run `path` configures."""
    return run(path)[:2]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        fm = {"name": "wan22_flow_matching", "preset": "tiny", **DIMS}
        teacher_run = experiment(tmp, "teacher", {**fm, "num_layers": TEACHER_LAYERS}, args.steps, args.device)
        teacher_ms, teacher_peak = timed(teacher_run)
        subprocess.run([str(WANFW), "export", str(teacher_run), "--checkpoint", str(tmp / "runs" / "teacher" / "version_0"),
                        "--out", str(tmp / "teacher")], check=True, capture_output=True)
        student_ms, student_peak = timed(experiment(tmp, "student", {**fm, "num_layers": STUDENT_LAYERS}, args.steps,
                                                args.device))
        teacher_dims = {f"teacher_{k}": v for k, v in DIMS.items()}
        distill = {"name": "wan22_distill", "teacher_preset": "tiny", **teacher_dims, "teacher_num_layers": TEACHER_LAYERS,
                   "teacher_weights": str(tmp / "teacher"), "teacher_dtype": "bfloat16",
                   "student_num_layers": STUDENT_LAYERS, "guidance_scale": 3.0}
        distill_ms, distill_peak = timed(experiment(tmp, "distill", distill, args.steps, args.device))
        fp32_ms, fp32_peak = timed(experiment(tmp, "distill_fp32", {**distill, "teacher_dtype": "float32"}, args.steps,
                                          args.device))
        idle = idle_memory(args.device)

    both_ms = teacher_ms + student_ms
    both_peak = idle + (teacher_peak - idle) + (student_peak - idle)
    print(f"teacher dim {DIMS['dim']} x {TEACHER_LAYERS} blocks (bf16, frozen), student {STUDENT_LAYERS} blocks; "
          f"latents [16, 5, 16, 16], batch 2, {args.device}, {args.steps} steps each; idle process {idle:.0f} MiB")
    print(f"  student alone:       {student_ms:7.1f} ms/step, peak {student_peak:6.0f} MiB")
    print(f"  distillation:        {distill_ms:7.1f} ms/step, peak {distill_peak:6.0f} MiB "
          f"(teacher in bf16: 2 guided forwards, no gradients)")
    print(f"  distillation, fp32 teacher: {fp32_ms:7.1f} ms/step, peak {fp32_peak:6.0f} MiB "
          f"(CPUs without bf16 matrix units run bf16 slower than fp32)")
    print(f"  training both (>=):  {both_ms:7.1f} ms/step, peak {both_peak:6.0f} MiB (teacher trained alone: "
          f"{teacher_ms:.1f} ms/step, {teacher_peak:.0f} MiB)")
    for label, ms, peak in (("bf16 teacher", distill_ms, distill_peak), ("fp32 teacher", fp32_ms, fp32_peak)):
        print(f"  distillation ({label}) / student alone: time {ms / student_ms:.2f}x, memory above idle "
              f"{(peak - idle) / (student_peak - idle):.2f}x; / training both: time {ms / both_ms:.2f}x, memory "
              f"above idle {(peak - idle) / (both_peak - idle):.2f}x")


if __name__ == "__main__":
    main()
