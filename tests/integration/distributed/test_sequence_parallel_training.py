"""Sequence parallelism (strategy.sequence_parallel, Ulysses) computes what whole sequences compute:
the tiny Wan DiT with its random noise and timesteps, its tokens split over groups of 2 ranks,
trains to the losses and weights of one rank holding every token — for t2v, ti2v and i2v, under
ddp and under fsdp with the groups sharded 2 x 2 on 4 ranks, with and without gradient
checkpointing. First the common case: a token count the group divides (every real video: 480p x
81 frames is 32,760 tokens), where no token is padding and attention runs unmasked; then one it
does not (27 tokens: one rank's share is padded and masked). Real torchrun, Gloo on loopback, CPU."""

import pytest

from harness.equivalence import assert_same_training, tiny_wan_rounding
from harness.launch import torchrun
from harness.layouts import CPU, DDP, FSDP, LR, experiment, run_on, tiny_wan
from harness.runs import losses
from harness.sequence_parallel import DIVIDES, GLOBAL_BATCH

ODD = {"buckets": ["3x6x6"], "num_samples": 24}  # 3 x 3 x 3 = 27 tokens: 14 a rank, one of them padding
TASKS = ["t2v", "ti2v", "i2v"]

LAYOUTS = {  # name: (strategy, batch per group, ranks, model options); one global batch of 2
    "ddp_sp2": ({**DDP, "sequence_parallel": 2}, 2, 2, {}),
    "fsdp_2x_sp2": ({**FSDP, "sequence_parallel": 2}, 1, 4, {}),
    # Checkpointed blocks recomputed in chunks of this rank's tokens, the self-attention exchanged whole.
    "ddp_sp2_checkpointed_in_3_chunks": ({**DDP, "sequence_parallel": 2}, 2, 2,
                                         {"gradient_checkpointing": True, "recompute_chunks": 3}),
    "fsdp_2x_sp2_checkpointed": ({**FSDP, "sequence_parallel": 2}, 1, 4, {"gradient_checkpointing": True}),
}


def assert_every_layout_trains_like_whole_sequences(tmp_path, task, data, tokens):
    model = tiny_wan(task)
    tolerance = tiny_wan_rounding(GLOBAL_BATCH, tokens)
    reference = run_on(tmp_path, "whole", CPU, GLOBAL_BATCH, model, data=data)
    for name, (strategy, batch, ranks, options) in LAYOUTS.items():
        split = run_on(tmp_path, name, strategy, batch, {**model, **options}, ranks, data=data)
        print(f"{task}, {tokens} tokens, {name}: {assert_same_training(split, reference, lr=LR, tolerance=tolerance)}")
        # Each sample counts once: the logged loss is the whole sequences'. A loss is a forward pass's
        # output, so the two agree to the forward rounding equivalence.py derives (relative, the same
        # bound as the gradients'); the weights' own differences add far less (1e-7 relative, above).
        assert losses(tmp_path, name) == pytest.approx(losses(tmp_path, "whole"), rel=tolerance), name


@pytest.mark.own_entry
@pytest.mark.every_vector_unit
@pytest.mark.parametrize("task", TASKS)
def test_groups_train_to_the_weights_of_whole_sequences_when_the_group_divides_the_tokens(tmp_path, task):
    assert_every_layout_trains_like_whole_sequences(tmp_path, task, DIVIDES, 48)


@pytest.mark.own_entry
@pytest.mark.every_vector_unit
@pytest.mark.parametrize("task", TASKS)
def test_groups_train_to_the_weights_of_whole_sequences_when_the_tokens_need_padding(tmp_path, task):
    assert_every_layout_trains_like_whole_sequences(tmp_path, task, ODD, 27)


def test_a_group_size_that_does_not_divide_the_heads_is_refused_on_every_rank(tmp_path):
    path = experiment(tmp_path, "four", {**DDP, "sequence_parallel": 4}, 1, tiny_wan("t2v"), data=ODD)
    result = torchrun("run", path, nproc=4, timeout=120)
    assert result.returncode != 0
    assert "the model's 2 attention heads do not split over a sequence-parallel group of 4" in result.stderr
    assert "choose strategy.sequence_parallel among the divisors of 2" in result.stderr


@pytest.mark.parametrize("data, split", [(DIVIDES, "48 tokens a sample over 2 ranks, 24 a rank\n"),
                                         (ODD, "27 tokens a sample over 2 ranks, 14 a rank (1 padding, masked)\n")],
                         ids=["divides", "padded"])
def test_the_start_up_lines_say_how_groups_split_the_batch_and_each_sample(tmp_path, data, split):
    path = experiment(tmp_path, "line", {**FSDP, "sequence_parallel": 2}, 1, tiny_wan("t2v"), data=data,
                      trainer={"max_steps": 1}, validation={"every": 1, "preview": True})
    result = torchrun("run", path, nproc=4)  # the main process's preview runs whole sequences, alone
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sequence parallel 2 (2 groups)" in result.stdout
    assert f"sequence parallel: {split}" in result.stdout
    assert "world size 4 in 2 sequence-parallel groups of 2 | batch 1 per group x 1 accumulation = global batch 2" \
        in result.stdout
