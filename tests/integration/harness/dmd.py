"""Distribution-matching distillation (DMD) from a tiny teacher: the model section, the experiment,
its run folder, and the distance between two sets of samples the quality tests use."""

import torch

from harness.references import reference_model
from harness.runs import base_config, write_run_config


CYCLE = 3  # generator 1 step, critic 2
BOUNDARY = 875
# Both experts of a two-expert teacher on their shared base; 4 steps at shift 5: levels 1.0,
# 0.9375 (high noise) and 0.8333, 0.625 (low noise), as the Lightning LoRAs take them.
EXPERTS = {"teacher_expert": "both", "teacher_boundary": BOUNDARY, "shared_base": True, "lora": {"rank": 4},
           "critic_lora": {"rank": 4}, "generator_steps": 4}


def two_experts(folder):
    """Two tiny diffusers DiTs of other random weights in `folder`, as the official A14B download
    holds them; returns the folder and each expert's reference model ("high", "low")."""
    return folder, {"high": reference_model(folder / "high_noise_model", seed=5),
                    "low": reference_model(folder / "low_noise_model", seed=6)}


def dmd(teacher, **model):
    return {"name": "wan22_distill", "teacher_preset": "tiny", "teacher_weights": str(teacher), "objective": "dmd",
            "inputs": "generator", "latent_size": "3x4x4", "generator_steps": 3, "real_guidance": 2.0,
            "critic_updates_per_generator_update": CYCLE - 1, "critic_lr_scale": 2.0, **model}


def config(tmp_path, teacher, name="dmd", steps=6, **model):
    c = base_config(tmp_path / "runs", model=dmd(teacher, **model),
                    data={"num_samples": 24, "batch_size": 4, "workers": 0},
                    optimizer={"lr": 1e-3, "weight_decay": 0.0},
                    trainer={"max_steps": steps, "log_every": 1, "progress": "lines"},
                    checkpoint={"every": 1, "keep_last": 0})
    return write_run_config(tmp_path, name, c)


def shared_name(name):
    """A separate critic's adapter name as the shared base holds it (the generator's second set)."""
    return name.replace("critic.", "generator.", 1).replace(".lora_A.", ".critic_lora_A.").replace(
        ".lora_B.", ".critic_lora_B.") if name.startswith("critic.") else name


def mmd2(x, y):
    """Unbiased MMD^2 (Gretton et al. 2012) of samples x [m, d] and y [n, d], RBF kernels at 0.5, 1
    and 2 times the median squared distance, summed: zero in expectation iff the distributions match."""
    both = torch.cat([x, y]).double()
    d = torch.cdist(both, both) ** 2
    median, m, n = d[d > 0].median(), len(x), len(y)
    total = 0.0
    for scale in (0.5, 1.0, 2.0):
        k = torch.exp(-d / (2 * scale * median))
        kxx, kyy, kxy = k[:m, :m], k[m:, m:], k[:m, m:]
        total += ((kxx.sum() - kxx.diag().sum()) / (m * (m - 1)) + (kyy.sum() - kyy.diag().sum()) / (n * (n - 1))
                  - 2 * kxy.mean()).item()
    return total
