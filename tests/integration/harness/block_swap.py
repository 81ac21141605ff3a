"""Block swap on the tiny Wan DiT (6 blocks, LoRA on a saved base): a trained run and its comparison
with the run without block swap."""

import pytest
import torch
from safetensors.torch import load_file

from harness.lora import experiment
from harness.references import reference_folder
from harness.runs import checkpoints, losses, run_dir, wanfw


LAYERS = 6


@pytest.fixture
def base(tmp_path):
    return reference_folder(tmp_path / "base", seed=5, num_layers=LAYERS)


def lora(base, **model):
    return {"name": "wan22_flow_matching", "preset": "tiny", "num_layers": LAYERS, "weights": str(base),
            "gradient_checkpointing": True, "lora": {"rank": 4, "alpha": 8}, **model}


def trained(tmp_path, name, model, swap=None, steps=6, **sections):
    path = experiment(tmp_path, name, model, steps=steps, checkpoint_every=steps,
                      **({"block_swap": swap} if swap else {}), **sections)
    result = wanfw("run", path, check=0)
    step = checkpoints(run_dir(tmp_path, name))[-1]
    return result.stdout + result.stderr, losses(tmp_path, name), load_file(step / "model.safetensors")


def assert_same(a, b):
    assert a[1] == b[1]  # every step's loss, as printed
    assert a[2].keys() == b[2].keys() and all(torch.equal(a[2][k], b[2][k]) for k in a[2])
