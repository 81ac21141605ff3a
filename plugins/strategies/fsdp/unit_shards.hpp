#pragma once
// A unit of fully sharded training (a model's wanfw::Unit, or the parameters in no unit):
// its flat shards, gathered and released together.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flat_shard.hpp"

namespace wanfw_fsdp {

struct UnitShards {
  std::string name;
  std::vector<std::unique_ptr<FlatShard>> flats;

  void start_gather(std::optional<at::ScalarType> compute) {
    for (auto& flat : flats) flat->start_gather(compute);
  }
  void gather(std::optional<at::ScalarType> compute) {
    start_gather(compute);
    for (auto& flat : flats) flat->finish_gather();
  }
  void release() {
    for (auto& flat : flats) flat->release();
  }
  /// The optimizer's leaves of this unit: the trainable flats' shards.
  std::vector<at::Tensor> trainable_shards() const {
    std::vector<at::Tensor> shards;
    for (const auto& flat : flats)
      if (flat->trainable()) shards.push_back(flat->shard());
    return shards;
  }
  /// The full gradients the trainable flats' parameters hold, mean-reduce-scattered in `reduce` and
  /// added to the shards' gradients (each rank keeps its piece; a shard on the host gets it by
  /// `to_host` when given, in the step's last micro-batch); the full ones go. A flat whose phase does not train it
  /// (FlatShard::reduces_gradients) drops them.
  void reduce_gradients(at::ScalarType reduce, wanfw::HostCopies* to_host) {
    at::NoGradGuard no_grad;
    for (auto& flat : flats) {
      if (!flat->trainable()) continue;
      if (flat->reduces_gradients()) {
        std::vector<at::Tensor> grads;
        for (const at::Tensor& p : flat->parameters()) grads.push_back(p.grad());
        flat->add_gradient(flat->reduce_gradient(grads, reduce), to_host);
      }
      for (const at::Tensor& p : flat->parameters()) const_cast<at::Tensor&>(p).mutable_grad().reset();
    }
  }
  /// The module's parameters of the trainable flats, flat after flat.
  std::vector<at::Tensor> trainable_parameters() const {
    std::vector<at::Tensor> parameters;
    for (const auto& flat : flats)
      if (flat->trainable()) parameters.insert(parameters.end(), flat->parameters().begin(), flat->parameters().end());
    return parameters;
  }
};

}  // namespace wanfw_fsdp
