"""Chunked recompute (model.recompute_chunks): each checkpointed block runs and is recomputed a chunk of
tokens at a time, its self-attention over every token at once. Each block's output and input gradient
are then the whole block's bit for bit (tests/unit/libs/test_chunked_recompute.cpp), and the
adapters' gradients, sums over the tokens, are summed a chunk at a time: a LoRA run of the tiny Wan
DiT ends at the run with whole blocks within equivalence.py's rounding bound, on every vector unit,
with adapter dropout (its masks drawn for whole sequences) and with the low-memory settings beside it;
a run names the memory options it takes."""

import pytest

from harness.equivalence import assert_same_training, state, tiny_wan_rounding
from harness.layouts import CPU, LR, experiment, run_on
from harness.references import reference_folder
from harness.runs import losses, wanfw

TOKENS = 192  # a 3x16x16 latent in 1x2x2 patches: chunks of 38 to 48 tokens, 152 to 192 rows of 4 samples
DATA = {"data": {"buckets": ["3x16x16"]}}
BOUND = tiny_wan_rounding(4, TOKENS)


@pytest.fixture
def lora(tmp_path):
    """LoRA on a saved base (a random DiT's zero head would leave the adapters without a gradient)."""
    return {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4, "timestep_sampling": "logit_normal",
            "weights": str(reference_folder(tmp_path / "base", seed=5)), "gradient_checkpointing": True,
            "lora": {"rank": 4, "alpha": 8, "dropout": 0.1}}


def assert_same_run(tmp_path, chunked, whole):
    a, b = run_on(tmp_path, chunked[0], CPU, 4, chunked[1], **DATA), run_on(tmp_path, whole[0], CPU, 4, whole[1], **DATA)
    assert_same_training(a, b, lr=LR, tolerance=BOUND)
    first, second = losses(tmp_path, chunked[0]), losses(tmp_path, whole[0])
    assert len(first) == len(second) == 5
    assert first[0] == second[0]  # the first step's forward, token for token the whole blocks'
    assert first == pytest.approx(second, rel=1e-5)


@pytest.mark.every_vector_unit
def test_a_lora_run_recomputed_in_chunks_ends_at_the_run_with_whole_blocks(tmp_path, lora):
    # 5 chunks of 192 tokens: 38 or 39 tokens each, a count that does not divide.
    assert_same_run(tmp_path, ("chunked", {**lora, "recompute_chunks": 5}), ("whole", lora))


def test_chunks_beside_the_fp8_base_block_swap_and_activation_offload_end_as_whole_blocks_with_them(tmp_path, lora):
    low = {**lora, "base_dtype": "float8_e4m3fn", "activation_offload": True}
    swap = {"block_swap": {"blocks": 1, "ring": 1}}
    result = wanfw("run", experiment(tmp_path, "chunked", CPU, 4, {**low, "recompute_chunks": 4}, **DATA, **swap),
                   check=0)
    # The start-up line names every memory option the run takes, as model-info's plan does.
    assert ("memory options: fp8 base, checkpointing, activation offload, recompute in 4 chunks, 1 blocks swapped "
            "(ring 1)\n") in result.stdout
    b = run_on(tmp_path, "whole", CPU, 4, low, **DATA, **swap)
    assert_same_training(state(tmp_path, "chunked"), b, lr=LR, tolerance=BOUND)
    assert losses(tmp_path, "chunked")[0] == losses(tmp_path, "whole")[0]


@pytest.mark.parametrize("model, says", [
    ({"gradient_checkpointing": False, "recompute_chunks": 4}, "gradient_checkpointing is off"),
    ({"recompute_chunks": 0}, "0 chunks of tokens"),
], ids=["without_checkpointing", "zero_chunks"])
def test_recompute_chunks_are_refused_where_they_cannot_serve(tmp_path, lora, model, says):
    result = wanfw("run", experiment(tmp_path, "refused", CPU, 4, {**lora, **model}), check=2)
    text = result.stdout + result.stderr
    assert "model.recompute_chunks" in text and says in text
