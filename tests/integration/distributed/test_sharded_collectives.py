"""The collectives sharded training builds on (all-gather, reduce-scatter, all-to-all), run by the
real torchrun over Gloo on loopback, checked against torch's arithmetic on every rank's inputs."""

import pytest
import torch
from safetensors.torch import load_file

from harness.launch import torchrun_tool


def run_ranks(tmp_path, world):
    result = torchrun_tool("collectives", world, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return [load_file(tmp_path / f"rank_{r}.safetensors") for r in range(world)]


@pytest.mark.parametrize("world", [2, 3])
def test_all_gather_places_rank_r_input_at_offset_r(tmp_path, world):
    ranks = run_ranks(tmp_path, world)
    expected = torch.cat([ranks[r]["gather_in"] for r in range(world)])
    for r in range(world):
        assert torch.equal(ranks[r]["gathered"], expected)


@pytest.mark.parametrize("world", [2, 3])
def test_reduce_scatter_gives_rank_r_the_reduced_chunk_r_for_sum_mean_and_max(tmp_path, world):
    ranks = run_ranks(tmp_path, world)
    inputs = torch.stack([ranks[r]["scatter_in"] for r in range(world)])
    signed = torch.stack([ranks[r]["scatter_in"] * (-1 if r == 1 else 1) for r in range(world)])
    for r in range(world):
        chunk = slice(4 * r, 4 * (r + 1))
        assert torch.equal(ranks[r]["summed"], inputs.sum(0)[chunk])
        assert torch.equal(ranks[r]["averaged"], inputs.sum(0)[chunk] / world)
        assert torch.equal(ranks[r]["largest"], signed.max(0).values[chunk])


@pytest.mark.parametrize("world", [2, 3])
def test_all_to_all_sends_chunk_k_to_rank_k_and_receives_in_rank_order(tmp_path, world):
    ranks = run_ranks(tmp_path, world)
    for r in range(world):
        expected = torch.cat([ranks[s]["exchange_in"].chunk(world)[r] for s in range(world)])
        assert torch.equal(ranks[r]["exchanged"], expected)


def test_split_groups_contiguous_ranks_within_and_the_same_places_across(tmp_path):
    """4 ranks in groups of 2: {0, 1} and {2, 3} within, {0, 2} and {1, 3} across."""
    ranks = run_ranks(tmp_path, 4)
    within = {0: (0, 1), 1: (0, 1), 2: (2, 3), 3: (2, 3)}
    across = {0: (0, 2), 1: (1, 3), 2: (0, 2), 3: (1, 3)}
    for r in range(4):
        assert torch.equal(ranks[r]["within_sum"], torch.full((3,), float(sum(within[r]))))
        assert torch.equal(ranks[r]["across_sum"], torch.full((3,), float(sum(across[r]))))
        assert torch.equal(ranks[r]["within_gathered"], torch.cat([ranks[g]["gather_in"] for g in within[r]]))
        assert ranks[r]["group_ranks"].tolist() == [r % 2, r // 2]
