"""Distillation from a tiny teacher: the teacher, the experiment, and the student's predictions."""

import pytest
import torch

from harness.references import reference_folder
from harness.runs import base_config, write_run_config


def config(tmp_path, teacher, name="distill", data=None, trainer=None, **model):
    c = base_config(tmp_path / "runs", model=distill(teacher, **model),
                    data=data or {"num_samples": 32, "batch_size": 4, "workers": 0, "buckets": ["2x4x4"]},
                    optimizer={"lr": 2e-3, "weight_decay": 0.0},
                    trainer={"max_steps": 30, "log_every": 1, "progress": "lines", **(trainer or {})},
                    checkpoint={"every": 0, "keep_last": 0})
    return write_run_config(tmp_path, name, c)


@pytest.fixture
def teacher(tmp_path):
    return reference_folder(tmp_path / "teacher", seed=3)


def inputs(seed=4, t=(300.0, 800.0)):
    """Two tiny-DiT inputs: latents [2, 4, 2, 4, 4] and 5-token contexts from `seed`, at timesteps `t`."""
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(2, 4, 2, 4, 4, generator=g), "t": torch.tensor(t),
            "context": torch.randn(2, 5, 32, generator=g)}


def distill(teacher, **model):
    return {"name": "wan22_distill", "teacher_preset": "tiny", "teacher_weights": str(teacher), **model}
