"""The tiny Wan DiT trained on every layout: the layouts (single, ddp, fsdp, grad_accum, data_parallel
replicas), the experiment config every layout shares, and a run on N ranks; the linear model's
equivalent for the deterministic parity tests."""

from harness.equivalence import (assert_same_training, largest_relative_difference, rounding, state,
                                 tiny_wan_rounding, trained, weights)
from harness.launch import torchrun
from harness.runs import base_config, checkpoints, wanfw, write_run_config


STEPS = 5
LR = 1e-3
GLOBAL_BATCH, TOKENS = 4, 12  # every layout's global batch; tokens of a 3x4x4 latent in 1x2x2 patches
TINY_WAN = tiny_wan_rounding(GLOBAL_BATCH, TOKENS)  # equivalence.py derives it
CPU = {"name": "single", "device": "cpu"}
DDP = {"name": "ddp", "timeout_s": 60}
FSDP = {"name": "fsdp", "timeout_s": 60}


def tiny_wan(task):
    return {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4, "task": task,
            "timestep_sampling": "logit_normal", **({"in_dim": 12} if task == "i2v" else {})}


def experiment(tmp_path, name, strategy, batch, model, **sections):
    c = base_config(tmp_path / "runs", strategy=strategy, model=model,
                    data={"num_samples": 24, "batch_size": batch, "workers": 0, "buckets": ["3x4x4"]},
                    optimizer={"lr": LR, "weight_decay": 0.01},
                    trainer={"max_steps": STEPS, "log_every": 1, "progress": "lines"},
                    checkpoint={"every": 0, "keep_last": 0})
    for key, value in sections.items():
        c[key] = {**c.get(key, {}), **value}
    return write_run_config(tmp_path, name, c)


def run_on(tmp_path, name, strategy, batch, model, ranks=1, **sections):
    """Runs the experiment; returns its last checkpoint's weights and AdamW state."""
    path = experiment(tmp_path, name, strategy, batch, model, **sections)
    if ranks == 1:
        wanfw("run", path, check=0)
    else:
        result = torchrun("run", path, nproc=ranks)
        assert result.returncode == 0, result.stdout + result.stderr
    return state(tmp_path, name)


LAYOUTS = {  # name: (strategy, batch per micro-batch, ranks); every one a global batch of 4
    "ddp_2x2": (DDP, 2, 2),
    "grad_accum_2x2": ({"name": "grad_accum", "steps": 2, "inner": CPU}, 2, 1),
    "ddp_2x1_accum_2": ({"name": "grad_accum", "steps": 2, "inner": DDP}, 1, 2),
    "data_parallel_2_replicas_x4": ({"name": "data_parallel", "devices": ["cpu", "cpu"]}, 4, 1),
}


def assert_resumed_from_step_3(tmp_path, resumed, layouts, uninterrupted, at_step_3, tolerance):
    """The run "resized", resumed from its step-3 checkpoint (`layouts`: the line naming the world
    sizes), ended at step 6 with the uninterrupted run's weights and AdamW state, and steps 4 to 6
    trained far beyond the difference. Returns the comparison."""
    assert "resumed from" in resumed.stdout and "step-00000003" in resumed.stdout
    assert layouts in resumed.stdout
    c = assert_same_training(state(tmp_path, "resized", step=6), uninterrupted, lr=LR, tolerance=tolerance)
    assert largest_relative_difference(weights(tmp_path, "resized", step=6), at_step_3) > 100 * c.relative
    return c


def linear_experiment(tmp_path, name, strategy, batch, data=None, **sections):
    """The linear model on `strategy`, `batch` samples a micro-batch, STEPS steps, no checkpoints."""
    c = base_config(tmp_path / "runs", strategy=strategy,
                    data={"num_samples": 256, "batch_size": batch, "workers": 0, **(data or {})},
                    trainer={"max_steps": STEPS, "log_every": 1, "progress": "lines"},
                    checkpoint={"every": 0, "keep_last": 0}, **sections)
    return write_run_config(tmp_path, name, c)


def assert_same_weights(a, b, batch=16):
    """The linear model's runs (base_config: lr 0.05, 8 inputs): its gradients are sums over the
    global batch of products over the inputs (equivalence.py)."""
    assert_same_training(a, b, lr=0.05, tolerance=rounding(batch * 8, 2))


WEIGHTS = {"mode": "bf16_weights"}
BF16_U = 2.0 ** -8  # bfloat16 unit roundoff: 8 significant bits


SIX_STEPS = {"trainer": {"max_steps": 6}, "checkpoint": {"every": 3}}  # a "resized" run: checkpoints at 3 and 6


def remove_checkpoint(checkpoint):
    for f in checkpoint.iterdir():
        f.unlink()
    checkpoint.rmdir()


def resume_resized_from_step_3(tmp_path, model, strategy, batch, ranks):
    """Run "resized" (SIX_STEPS) resumed from its step-3 checkpoint on `strategy`, `batch` samples a
    rank and `ranks` ranks, its later checkpoints removed first. Returns the launch's output and the
    weights and AdamW state it ended with."""
    run_dir = tmp_path / "runs" / "resized" / "version_0"
    for late in [p for p in checkpoints(run_dir) if p.name != "step-00000003"]:
        remove_checkpoint(late)
    path = experiment(tmp_path, "resized", strategy, batch, model, **SIX_STEPS)
    result = torchrun("run", path, "--resume", "auto", nproc=ranks) if ranks > 1 else \
        wanfw("run", path, "--resume", "auto", check=0)
    assert result.returncode == 0 and "resumed from" in result.stdout, result.stdout + result.stderr
    return result.stdout + result.stderr, trained(checkpoints(run_dir)[-1])
