"""Ulysses sequence parallelism's exchanges (sequence_to_heads, heads_to_sequence), run by the real
torchrun over Gloo: self-attention with the tokens split over the ranks gives each rank exactly
its tokens of attention over the whole sequence, and the gradients of its tokens."""

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from harness.launch import torchrun_tool


def run_group(tmp_path, world, *args):
    return torchrun_tool("ulysses", world, tmp_path, *args)


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("world", [2, 3])
def test_split_attention_gives_each_rank_its_tokens_of_whole_sequence_attention_and_their_gradients(tmp_path, world):
    result = run_group(tmp_path, world)
    assert result.returncode == 0, result.stderr[-3000:]
    full = load_file(tmp_path / "full.safetensors")
    q, k, v = (full[n].requires_grad_(True) for n in ("q", "k", "v"))
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    (out * full["w"]).sum().backward()
    share = q.shape[1] // world
    for r in range(world):
        mine = load_file(tmp_path / f"rank_{r}.safetensors")
        tokens = slice(r * share, (r + 1) * share)
        # The same per-head arithmetic on the same numbers: fp32 rounding at most.
        torch.testing.assert_close(mine["out"], out.detach()[:, tokens])
        for name, reference in (("q_grad", q.grad), ("k_grad", k.grad), ("v_grad", v.grad)):
            torch.testing.assert_close(mine[name], reference[:, tokens], msg=f"rank {r} {name}")


def test_heads_not_divisible_by_the_group_are_refused_on_every_rank_naming_both(tmp_path):
    result = run_group(tmp_path, 4, "6")
    assert result.returncode != 0
    assert "6 attention heads do not split over a sequence-parallel group of 4" in result.stderr
    assert "timed out" not in result.stderr.lower()
