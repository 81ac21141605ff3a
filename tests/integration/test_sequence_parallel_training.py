"""Sequence parallelism (strategy.sequence_parallel, Ulysses) computes what whole sequences compute:
the tiny Wan DiT with its random noise and timesteps, its 27 tokens split over groups of 2 ranks
(so one rank's share is padded and masked), trains to the losses and weights of one rank holding
every token — under ddp, under fsdp with the groups sharded 2 x 2 on 4 ranks, and with gradient
checkpointing. Real torchrun, Gloo on loopback, CPU."""

import pytest
from equivalence import assert_same_training, tiny_wan_rounding
from test_distributed import metrics, torchrun
from test_layout_invariance import CPU, DDP, FSDP, LR, experiment, run_on, tiny_wan

ODD = {"buckets": ["3x6x6"], "num_samples": 24}  # 3 x 3 x 3 = 27 tokens in 1x2x2 patches: odd
GLOBAL_BATCH, TOKENS = 2, 27

LAYOUTS = {  # name: (strategy, batch per group, ranks, model options); one global batch of 2
    "ddp_sp2": ({**DDP, "sequence_parallel": 2}, 2, 2, {}),
    "fsdp_2x_sp2": ({**FSDP, "sequence_parallel": 2}, 1, 4, {}),
    "ddp_sp2_checkpointed": ({**DDP, "sequence_parallel": 2}, 2, 2, {"gradient_checkpointing": True}),
}


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("task", ["t2v", "ti2v"])
def test_sequence_parallel_groups_train_to_the_losses_and_weights_of_whole_sequences(tmp_path, task):
    model = tiny_wan(task)
    tolerance = tiny_wan_rounding(GLOBAL_BATCH, TOKENS)
    reference = run_on(tmp_path, "whole", CPU, GLOBAL_BATCH, model, data=ODD)
    losses = [float(r["loss"]) for r in metrics(tmp_path, "whole")]
    for name, (strategy, batch, ranks, options) in LAYOUTS.items():
        split = run_on(tmp_path, name, strategy, batch, {**model, **options}, ranks, data=ODD)
        print(f"{task} {name}: {assert_same_training(split, reference, lr=LR, tolerance=tolerance)}")
        # Each sample counts once: the logged loss is the whole sequences'. A loss is a forward pass's
        # output, so the two agree to the forward rounding equivalence.py derives (relative, the same
        # bound as the gradients'); the weights' own differences add far less (1e-7 relative, above).
        split_losses = [float(r["loss"]) for r in metrics(tmp_path, name)]
        assert split_losses == pytest.approx(losses, rel=tolerance), (name, split_losses, losses)


def test_a_group_size_that_does_not_divide_the_heads_is_refused_on_every_rank(tmp_path):
    path = experiment(tmp_path, "four", {**DDP, "sequence_parallel": 4}, 1, tiny_wan("t2v"), data=ODD)
    result = torchrun("run", path, nproc=4, timeout=120)
    assert result.returncode != 0
    assert "the model's 2 attention heads do not split over a sequence-parallel group of 4" in result.stderr
    assert "choose strategy.sequence_parallel among the divisors of 2" in result.stderr


def test_the_start_up_lines_say_how_groups_split_the_batch_and_each_sample(tmp_path):
    path = experiment(tmp_path, "line", {**FSDP, "sequence_parallel": 2}, 1, tiny_wan("t2v"), data=ODD,
                      trainer={"max_steps": 1}, validation={"every": 1, "preview": True})
    result = torchrun("run", path, nproc=4)  # the main process's preview runs whole sequences, alone
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sequence parallel 2 (2 groups)" in result.stdout
    assert "sequence parallel: 27 tokens a sample over 2 ranks, 14 a rank (1 padding, masked)" in result.stdout
    assert "world size 4 in 2 sequence-parallel groups of 2 | batch 1 per group x 1 accumulation = global batch 2" \
        in result.stdout
