"""Hybrid sharding (strategy fsdp with `replicate: R`): the ranks in R replica groups of contiguous
ranks, each sharding the whole state over its ranks, the groups' reduced shards averaged once a
step. The tiny Wan DiT, its random noise and timesteps keyed by sample, ends at the weights of one
device with the whole batch: 2 replica groups of 2 shards, with sequence parallelism inside a
group (also on 27 tokens, a padded share), with a clip that binds; its checkpoints, written by the
first group, resume on plain fsdp, on 4 groups of 1, on ddp and on one device; model-info plans a group's share and the
traffic within and across the groups. Real torchrun, Gloo on loopback, CPU."""

import re

import pytest

from harness.equivalence import assert_same_training, tiny_wan_rounding, trained
from harness.launch import torchrun
from harness.layouts import (CPU, DDP, FSDP, GLOBAL_BATCH, LR, SIX_STEPS, STEPS, TINY_WAN, experiment,
                             resume_resized_from_step_3, run_on, tiny_wan)
from harness.runs import SOURCE, checkpoints, metrics, wanfw

HYBRID = {**FSDP, "replicate": 2}


@pytest.mark.every_vector_unit
def test_two_replica_groups_of_two_shards_end_at_one_devices_weights_with_and_without_sequence_parallel(tmp_path):
    model = tiny_wan("t2v")
    reference = run_on(tmp_path, "single_1x4", CPU, 4, model)
    layouts = {  # name: (strategy, batch per rank, ranks); every one a global batch of 4
        "hybrid_2x2": (HYBRID, 1, 4),
        # Each replica group one sequence-parallel pair: a sample's 12 tokens over its 2 ranks.
        "hybrid_2x2_sp2": ({**HYBRID, "sequence_parallel": 2}, 2, 4),
        # 2 data ranks x 1 sample x 2 accumulated micro-batches.
        "hybrid_2x2_sp2_accum_2": ({"name": "grad_accum", "steps": 2, "inner": {**HYBRID, "sequence_parallel": 2}}, 1,
                                   4),
    }
    for name, (strategy, batch, ranks) in layouts.items():
        c = assert_same_training(run_on(tmp_path, name, strategy, batch, model, ranks), reference, lr=LR,
                                 tolerance=TINY_WAN)
        print(f"{name} vs single 1x4: {c}")


@pytest.mark.every_vector_unit
def test_a_padded_sequence_share_and_a_binding_clip_train_as_one_device_in_replica_groups(tmp_path):
    # 27 tokens (3x6x6 in 1x2x2 patches) over a sequence-parallel pair: 14 and 13, one padded. A clip
    # far below the gradient's norm binds each step: each shard counted once, not once a group.
    model, sections = tiny_wan("t2v"), {"data": {"buckets": ["3x6x6"]}, "trainer": {"grad_clip": 0.01}}
    one = run_on(tmp_path, "one_x4", CPU, 4, model, **sections)
    hybrid = run_on(tmp_path, "hybrid", {**HYBRID, "sequence_parallel": 2}, 2, model, 4, **sections)
    norms = [float(r["grad_norm"]) for r in metrics(tmp_path, "hybrid")]
    expected = [float(r["grad_norm"]) for r in metrics(tmp_path, "one_x4")]
    assert len(norms) == STEPS and min(expected) > 10 * 0.01, expected
    assert norms == pytest.approx(expected, rel=1e-5), (norms, expected)
    c = assert_same_training(hybrid, one, lr=LR, tolerance=tiny_wan_rounding(GLOBAL_BATCH, 27))
    print(f"27 tokens, clipped, hybrid 2x2 sp2 vs 1x4: {c}")


@pytest.mark.every_vector_unit
def test_a_checkpoint_of_two_replica_groups_resumes_on_plain_fsdp_four_groups_of_one_ddp_and_one_device(tmp_path):
    model = tiny_wan("t2v")
    result = torchrun("run", experiment(tmp_path, "resized", HYBRID, 1, model, **SIX_STEPS), nproc=4)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 replica groups of 2 ranks" in result.stdout + result.stderr
    run_dir = tmp_path / "runs" / "resized" / "version_0"
    uninterrupted = trained(checkpoints(run_dir)[-1])
    assert checkpoints(run_dir)[0].name == "step-00000003"
    for name, (strategy, batch, ranks) in {"fsdp 1x4": (FSDP, 1, 4), "4 groups of 1": ({**FSDP, "replicate": 4}, 1, 4),
                                           "ddp 2x2": (DDP, 2, 2), "one device": (CPU, 4, 1)}.items():
        _, resumed = resume_resized_from_step_3(tmp_path, model, strategy, batch, ranks)
        c = assert_same_training(resumed, uninterrupted, lr=LR, tolerance=TINY_WAN)
        print(f"resumed on {name} vs hybrid 2x2: {c}")


@pytest.mark.parametrize("strategy, ranks, message", [
    ({**FSDP, "replicate": 3}, 4, "strategy.replicate: 3 replica groups do not split the 4 ranks into equal groups"),
    ({**FSDP, "replicate": 4, "sequence_parallel": 2}, 4,
     "a replica group of 1 ranks does not hold whole sequence-parallel groups of 2"),
])
def test_replica_groups_the_ranks_cannot_form_are_refused_naming_the_option(tmp_path, strategy, ranks, message):
    result = torchrun("run", experiment(tmp_path, "bad", strategy, 1, tiny_wan("t2v")), nproc=ranks)
    assert result.returncode != 0 and message in result.stdout + result.stderr, result.stdout + result.stderr


def test_model_info_plans_a_replica_groups_share_and_its_traffic_within_and_across_the_groups():
    # The two-node example: 16 GPUs as 2 replica groups of 8. A GPU keeps 1/8 of the expert's state;
    # a step gathers its parameters twice (bf16) and reduce-scatters their gradients (float32) over
    # its group's ring, then all-reduces its eighth of the gradient across the groups.
    said = wanfw("model-info", SOURCE / "examples" / "wan22-t2v-a14b-low-noise-finetune-2-nodes.yaml", "--gpus", "16",
                 check=0).stdout
    assert "memory plan per GPU, fsdp on 16 GPUs, sequence parallel 2, 2 replica groups of 8" in said, said
    assert "1/8 of 212.92 GiB" in said and "fits an 80 GB GPU" in said
    parameters = int(re.search(r"parameters: ([\d,]+)", said)[1].replace(",", ""))
    gathered, reduced, gib = 2 * parameters, 4 * parameters, 2 ** 30
    within, across = (2 * gathered + reduced) * 7 / 8, 2 * (reduced / 8) / 2
    plain = (2 * gathered + reduced) * 15 / 16
    assert (f"{within / gib:.2f} GiB within a group of 8 ranks, {across / gib:.2f} GiB across groups; plain sharded "
            f"over all 16 ranks {plain / gib:.2f} GiB") in said, said
