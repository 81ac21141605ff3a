"""Sequence parallelism on the shapes people train, not only the convenient ones: the token layout
of an A14B expert at 480p x 81 frames (21 x 30 x 52 = 32,760 tokens) over groups of 2 and 8 at
tiny width, and epochs whose samples do not fill the last step batch (data.drop_last false pads it
with repeats, true leaves the tail out), each against one device holding every token. Real
torchrun, Gloo on loopback, CPU."""

import pytest

from harness.equivalence import assert_same_training, state, tiny_wan_rounding
from harness.launch import torchrun
from harness.layouts import CPU, DDP, FSDP, LR, experiment, run_on, tiny_wan
from harness.shared_runs import shared_run_on

# One block of 8 heads of 16 channels: the A14B token grid at a width a CPU trains in a minute a step
# (the CPU attention kernel runs 16-channel heads twice as fast as 8-channel ones).
A14B_GRID = {"buckets": ["21x60x104"], "num_samples": 4}  # latents [4, 21, 60, 104] in 1x2x2 patches
A14B_TOKENS = 21 * 30 * 52
NARROW = {"dim": 128, "num_heads": 8, "ffn_dim": 64, "num_layers": 1}


def assert_the_a14b_480p_token_layout_trains_alike_over_a_group_of(tmp_path, group):
    """One step on one device holding every token, and on `group` ranks sharing them. One test a
    group: each its own CTest entry, so that the two fit their budget side by side on 2 cores;
    the one-device run is made once for the two (tests/integration/harness/shared_runs.py),
    after the split run, so that a test whose split run ends first makes it while the others
    still run theirs."""
    model = {**tiny_wan("t2v"), **NARROW}
    one_step = {"trainer": {"max_steps": 1}, "data": A14B_GRID}
    slow = {**DDP, "timeout_s": 600}  # 8 ranks on 2 cores: a collective may wait minutes for the others
    path = experiment(tmp_path, "split", {**slow, "sequence_parallel": group}, 1, model, **one_step)
    result = torchrun("run", path, nproc=group, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (f"sequence parallel: {A14B_TOKENS} tokens a sample over {group} ranks, {A14B_TOKENS // group} a rank\n"
            in result.stdout)  # every group here divides the tokens: nothing padded
    whole = shared_run_on("a14b_480p_tokens_on_one_device", CPU, 1, model, **one_step)
    c = assert_same_training(state(tmp_path, "split"), whole, lr=LR,
                             tolerance=tiny_wan_rounding(1, A14B_TOKENS, layers=NARROW["num_layers"]))
    print(f"{A14B_TOKENS} tokens over a group of {group}: {c}")


@pytest.mark.own_entry
def test_the_a14b_480p_token_layout_trains_alike_over_sequence_parallel_groups_of_2(tmp_path):
    assert_the_a14b_480p_token_layout_trains_alike_over_a_group_of(tmp_path, 2)


@pytest.mark.own_entry
def test_the_a14b_480p_token_layout_trains_alike_over_sequence_parallel_groups_of_8(tmp_path):
    assert_the_a14b_480p_token_layout_trains_alike_over_a_group_of(tmp_path, 8)


LEFTOVER = {"buckets": ["3x8x8"], "num_samples": 7}  # step batches of 4: 7 = 4 + 3


@pytest.mark.parametrize("drop_last", [False, True], ids=["padded", "dropped"])
def test_an_epoch_that_does_not_fill_its_last_step_trains_alike_under_sequence_parallel_groups(tmp_path, drop_last):
    model = tiny_wan("ti2v")
    two_epochs = {"trainer": {"max_steps": 0, "epochs": 2}, "data": {**LEFTOVER, "drop_last": drop_last}}
    whole = run_on(tmp_path, "whole", CPU, 4, model, **two_epochs)
    assert whole.step == (4 if not drop_last else 2)  # 7 samples: 2 steps an epoch padded, 1 with the tail left out
    tolerance = tiny_wan_rounding(4, 48)
    for name, (strategy, ranks) in {"fsdp_2x_sp2": ({**FSDP, "sequence_parallel": 2}, 4),
                                    "ddp_2x_sp2": ({**DDP, "sequence_parallel": 2}, 4)}.items():
        split = run_on(tmp_path, name, strategy, 2, model, ranks, **two_epochs)
        print(f"7 samples, drop_last {drop_last}, {name}: {assert_same_training(split, whole, lr=LR, tolerance=tolerance)}")
