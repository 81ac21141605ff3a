"""A fully sharded unit (gather_unit), run by the real torchrun over Gloo: every rank holds one
flat shard of the parameters, gathers them whole for its part of the batch, and receives the
gradient of its own piece — the piece of the gradient one process computes on the whole batch."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import torchrun_tool
from safetensors.torch import load_file


def run_ranks(tmp_path, world, *args):
    result = torchrun_tool("wanfw_fsdp_unit_tool", world, tmp_path, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return load_file(tmp_path / "full.safetensors"), [load_file(tmp_path / f"rank_{r}.safetensors")
                                                       for r in range(world)]


def piece(tensors, world, rank):
    """Rank `rank`'s flat shard: each tensor's rows [r*c, (r+1)*c), c = ceil(rows / world), zero-padded."""
    parts = []
    for t in tensors:
        rows = t.reshape(t.shape[0], -1)
        c = math.ceil(rows.shape[0] / world)
        mine = rows[rank * c:(rank + 1) * c]
        parts.append(torch.cat([mine, rows.new_zeros(c - mine.shape[0], rows.shape[1])]).flatten())
    return torch.cat(parts)


def whole_batch_gradients(full):
    w1, b1, w2 = (full[n].clone().requires_grad_(True) for n in ("w1", "b1", "w2"))
    F.linear(F.relu(F.linear(full["x"], w1, b1)), w2).pow(2).mean().backward()
    return [w1.grad, b1.grad, w2.grad]


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("world", [2, 3])
def test_each_rank_receives_its_piece_of_the_whole_batch_gradient(tmp_path, world):
    full, ranks = run_ranks(tmp_path, world)
    grads = whole_batch_gradients(full)
    for r in range(world):
        assert torch.equal(ranks[r]["shard"], piece([full["w1"], full["b1"], full["w2"]], world, r))
        # One process sums the batch in one order, the ranks in pieces: fp32 rounding at most.
        torch.testing.assert_close(ranks[r]["grad"], piece(grads, world, r), msg=f"rank {r}")


@pytest.mark.every_vector_unit
def test_a_bf16_gather_computes_in_bf16_and_returns_fp32_gradients_near_the_fp32_ones(tmp_path):
    full, ranks = run_ranks(tmp_path, 2, "bf16")
    grads = whole_batch_gradients(full)
    for r in range(2):
        assert ranks[r]["grad"].dtype == torch.float32
        expected = piece(grads, 2, r)
        # bf16 keeps 8 significant bits: a relative error of a few 2^-8 through two layers.
        assert (ranks[r]["grad"] - expected).norm() <= 0.05 * expected.norm()
        assert not torch.equal(ranks[r]["grad"], expected)


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("world", [2, 3])
def test_adamw_on_shards_with_the_global_norm_clipped_trains_the_weights_of_one_process(tmp_path, world):
    """Three steps: the gradient norm from every rank's shard, clipping to 0.5, AdamW on each shard
    with its own moments — the pieces of what torch's AdamW does on the whole parameters."""
    full, ranks = run_ranks(tmp_path, world, "steps")
    params = [full[n].clone().requires_grad_(True) for n in ("w1", "b1", "w2")]
    adamw = torch.optim.AdamW(params, lr=0.1, weight_decay=0.01)
    norms = []
    for _ in range(3):
        adamw.zero_grad()
        F.linear(F.relu(F.linear(full["x"], params[0], params[1])), params[2]).pow(2).mean().backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, 0.5)))
        adamw.step()
    assert norms[0] > 0.5  # the clipping acts
    for r in range(world):
        torch.testing.assert_close(ranks[r]["norms"], torch.tensor(norms, dtype=torch.float64), rtol=1e-5, atol=0)
        torch.testing.assert_close(ranks[r]["trained"], piece([p.detach() for p in params], world, r),
                                   msg=f"rank {r}")
