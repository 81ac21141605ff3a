// One data-parallel step of a two-layer network whose parameters are one fully sharded unit
// (started by torchrun): each rank packs its shard, gathers the unit, runs its part of the batch
// and back-propagates. Writes OUT/full.safetensors (the whole parameters and batch) and
// OUT/rank_<R>.safetensors (its shard and the shard's gradient), for the Python test to compare
// with the whole batch on one process.
//
//   torchrun --no-python --nproc-per-node=3 wanfw_fsdp_unit_tool OUT [bf16|steps]
//
// With `steps`, it then trains three steps more as fully sharded training does: the global gradient
// norm from every rank's shard, clipping, and AdamW on the shard alone (its moments a shard too),
// and writes the shard it ends with ("trained") and the norms ("norms").

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/distributed.hpp"
#include "wanfw/error.hpp"
#include "wanfw/fully_sharded.hpp"
#include "wanfw/safetensors.hpp"

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fputs("usage: wanfw_fsdp_unit_tool OUT_FOLDER [bf16|steps]\n", stderr);
    return 2;
  }
  try {
    auto session = wanfw::DistributedSession::join({.backend = "gloo", .device = "cpu"});
    const int world = session->world_size(), rank = session->rank();
    const at::ScalarType compute = argc == 3 && std::string(argv[2]) == "bf16" ? at::kBFloat16 : at::kFloat;
    torch::manual_seed(0);  // every rank draws the same whole parameters and batch
    // 7 hidden rows: no world size here divides them, so padding rows are exercised.
    const at::Tensor w1 = at::randn({7, 5}), b1 = at::randn({7}), w2 = at::randn({3, 7}), x = at::randn({6, 5});
    const wanfw::UnitLayout layout({{"w1", {7, 5}}, {"b1", {7}}, {"w2", {3, 7}}}, world);
    const at::Tensor shard = layout.pack({w1, b1, w2}, rank, at::kFloat).requires_grad_(true);
    const at::Tensor first_shard = shard.detach().clone();
    const auto p = wanfw::gather_unit(shard, layout, *session, compute, at::kFloat);
    const std::int64_t share = x.size(0) / world;
    const at::Tensor mine = x.narrow(0, rank * share, share).to(compute);
    const at::Tensor y = at::linear(at::relu(at::linear(mine, p[0], p[1])), p[2]);
    y.to(at::kFloat).pow(2).mean().backward();  // this rank's mean: the ranks' mean is the batch's

    std::vector<std::pair<std::string, at::Tensor>> saved = {{"shard", first_shard}, {"grad", shard.grad().clone()}};
    if (argc == 3 && std::string(argv[2]) == "steps") {
      torch::optim::AdamW adamw({shard}, torch::optim::AdamWOptions(0.1).weight_decay(0.01));
      std::vector<double> norms;
      for (int step = 0; step < 3; ++step) {
        if (step > 0) {
          shard.mutable_grad().zero_();
          const auto q = wanfw::gather_unit(shard, layout, *session, at::kFloat, at::kFloat);
          at::linear(at::relu(at::linear(mine, q[0], q[1])), q[2]).pow(2).mean().backward();
        }
        const double norm = wanfw::sharded_gradient_norm({shard.grad()}, *session);
        norms.push_back(norm);
        shard.mutable_grad().mul_(std::min(1.0, 0.5 / (norm + 1e-6)));  // clip to 0.5
        adamw.step();
      }
      saved.emplace_back("trained", shard.detach().clone());
      saved.emplace_back("norms", at::tensor(norms, at::kDouble));
    }

    const std::filesystem::path folder = argv[1];
    if (rank == 0)
      wanfw::write_safetensors(folder / "full.safetensors", {{"w1", w1}, {"b1", b1}, {"w2", w2}, {"x", x}});
    wanfw::write_safetensors(folder / fmt::format("rank_{}.safetensors", rank), saved);
    session->barrier();
    return 0;
  } catch (const wanfw::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
