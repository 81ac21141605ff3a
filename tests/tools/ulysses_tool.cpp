// Runs self-attention under Ulysses sequence parallelism (started by torchrun: the whole world is
// one sequence-parallel group) and writes what the Python test compares with attention over the
// whole sequence: OUT/full.safetensors (q, k, v and the loss weights, every token) and
// OUT/rank_<R>.safetensors (this rank's output tokens and the gradients of its q, k, v tokens).
//
//   torchrun --no-python --nproc-per-node=3 wanfw_test_tools ulysses OUT [HEADS]

#include <cstdio>
#include <filesystem>
#include <string>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "tools.hpp"
#include "wanfw/parallel/distributed.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/parallel/sequence_parallel.hpp"

int ulysses_tool(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fputs("usage: wanfw_test_tools ulysses OUT_FOLDER [HEADS]\n", stderr);
    return 2;
  }
  try {
    auto session = wanfw::DistributedSession::join({.backend = "gloo", .device = "cpu"});
    const std::int64_t p = session->world_size(), rank = session->rank();
    const std::int64_t batch = 2, tokens = 12, heads = argc == 3 ? std::stoll(argv[2]) : 6, dim = 4;
    torch::manual_seed(0);  // every rank draws the same whole tensors and keeps its tokens
    const at::Tensor q = at::randn({batch, tokens, heads, dim}), k = at::randn({batch, tokens, heads, dim}),
                     v = at::randn({batch, tokens, heads, dim}), w = at::randn({batch, tokens, heads, dim});
    const auto mine = [&](const at::Tensor& t) {
      return t.narrow(1, rank * tokens / p, tokens / p).clone().requires_grad_(true);
    };
    const at::Tensor q_local = mine(q), k_local = mine(k), v_local = mine(v);
    const at::Tensor qh = wanfw::sequence_to_heads(q_local, *session), kh = wanfw::sequence_to_heads(k_local, *session),
                     vh = wanfw::sequence_to_heads(v_local, *session);
    const at::Tensor attended =
        at::scaled_dot_product_attention(qh.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2)).transpose(1, 2);
    const at::Tensor out = wanfw::heads_to_sequence(attended, *session);
    (out * w.narrow(1, rank * tokens / p, tokens / p)).sum().backward();

    const std::filesystem::path folder = argv[1];
    if (rank == 0) wanfw::write_safetensors(folder / "full.safetensors", {{"q", q}, {"k", k}, {"v", v}, {"w", w}});
    wanfw::write_safetensors(
        folder / fmt::format("rank_{}.safetensors", rank),
        {{"out", out.detach()}, {"q_grad", q_local.grad()}, {"k_grad", k_local.grad()}, {"v_grad", v_local.grad()}});
    session->barrier();
    return 0;
  } catch (const wanfw::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
