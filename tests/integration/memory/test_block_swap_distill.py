"""Block swap under distillation (wan22_distill): the frozen base of a DMD run shared by the real
score, the generator and the critic, a DMD critic with a base of its own, and the base of a LoRA
student learning the teacher's velocity stream their block weights from host memory and end with
the weights and losses of the same run without it, bit for bit."""

import json

import pytest
import torch
from safetensors.torch import load_file

from harness.distill import config as distill_config
from harness.dmd import config as dmd_config
from harness.references import reference_folder
from harness.runs import checkpoints, read_csv, wanfw, write_config

LAYERS = 4
ADAPTERS = {"lora": {"rank": 4}, "gradient_checkpointing": True}


@pytest.fixture
def teacher(tmp_path):
    return reference_folder(tmp_path / "teacher", seed=3, num_layers=LAYERS)


def trained(tmp_path, path, name, swap):
    if swap:
        c = json.loads(path.read_text())
        c["block_swap"] = swap
        write_config(path, c)
    result = wanfw("run", path, check=0)
    run = tmp_path / "runs" / name / "version_0"
    losses = [r["loss"] for r in read_csv(run / "metrics.csv")]
    return result.stdout + result.stderr, losses, load_file(checkpoints(run)[-1] / "model.safetensors")


def assert_same(a, b):
    assert a[1] == b[1]  # every step's loss, as printed
    assert a[2].keys() == b[2].keys() and all(torch.equal(a[2][k], b[2][k]) for k in a[2])


@pytest.mark.parametrize("shared, units", [(True, LAYERS), (False, 2 * LAYERS)], ids=["shared_base", "own_critic"])
def test_a_dmd_run_with_block_swap_ends_bitwise_as_the_run_without_it(tmp_path, teacher, shared, units):
    model = {**ADAPTERS, "critic_lora": {"rank": 4}, "shared_base": shared,
             "teacher_num_layers": LAYERS, "student_num_layers": LAYERS}
    reference = trained(tmp_path, dmd_config(tmp_path, teacher, "resident", **model), "resident", None)
    swap = {"blocks": units - 1, "ring": 1}  # every streamed block leaves its slot for the next
    swapped = trained(tmp_path, dmd_config(tmp_path, teacher, "swapped", **model), "swapped", swap)
    assert f"block swap: {units - 1} of {units} blocks stream from" in swapped[0]
    assert_same(swapped, reference)


def test_a_lora_student_of_the_teachers_velocity_with_block_swap_ends_bitwise_as_without_it(tmp_path, teacher):
    model = {**ADAPTERS, "teacher_num_layers": LAYERS, "student_num_layers": LAYERS}

    def run(name, swap=None):
        path = distill_config(tmp_path, teacher, name=name, trainer={"max_steps": 6}, **model)
        return trained(tmp_path, path, name, swap)

    reference, swapped = run("resident"), run("swapped", {"blocks": 2, "ring": 1})
    assert "block swap: 2 of 4 blocks stream from" in swapped[0]
    assert_same(swapped, reference)
