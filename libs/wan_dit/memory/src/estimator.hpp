#pragma once
// Internal to memory/: the one estimate (wan/memory_estimate.hpp) as a class whose members add its
// parts in the order the plan prints them; the weights and their training state are counted in
// memory_estimate.cpp, what a step computes with (gathers, activations, fp8 products) in
// activation_estimate.cpp.

#include <string>
#include <vector>

#include <fmt/format.h>

#include "wan/memory_estimate.hpp"

namespace wan::estimate {

/// The smallest power of two at least `bytes` (the CUDA host allocator's block for a pinned tensor).
double power_of_two(double bytes);

/// One block's parameters and the rest of the DiT's (embeddings, time projection, head): their
/// counts, and their bytes in the weights' storage; a VACE model's branch apart: each VACE block
/// (a unit) and the context's patch embedding.
struct WeightBytes {
  double block = 0, rest = 0;              ///< bytes (a block's Linear weights in fp8 with scales, when asked)
  double block_values = 0, rest_values = 0;  ///< parameters
  std::vector<double> vace_blocks;          ///< bytes of each VACE block (its projections included)
  double vace_embedding = 0;                ///< bytes of the context's patch embedding
};

/// Sums the network's parameters (WanConfig::parameters) by place, each in its storage.
WeightBytes weight_bytes(const WanConfig& c, double value_bytes, const BaseStorage& storage);

/// The activation formula, written once: for `tokens` a rank, a checkpointed block keeps its input
/// (dim values a token) and a block that runs (or recomputes) for backward holds what
/// recomputed_block_bytes counts; `a` bytes a value. `all` (no checkpointing): every block keeps
/// its activations, whole.
struct BlockActivations {
  double input = 0, recompute = 0, all = 0, layers = 0;
  double most() const { return layers * (input + recompute); }
};

BlockActivations block_activations(const WanConfig& c, double tokens, double a, std::int64_t chunks, bool split);

double tokens_of(const WanConfig& c, const std::vector<std::int64_t>& latent);

/// One estimate in parts, each a member below, added in the order the plan prints them: the
/// weights and their training state, the networks held beside them, what a sharded step gathers,
/// the activations, and the fp8 products' and the allocator's extra.
class Estimator {
 public:
  /// The ranks a sharded state is split over: every GPU, or a replica group's (fsdp replicate).
  static int shard_ranks(const wanfw::TrainingLayout& layout) {
    return std::max(1, layout.gpus / std::max(1, layout.replica_groups));
  }
  Estimator(const PlannedRun& run, const MemorySettings& s, const wanfw::TrainingLayout& layout)
      : run_(run), s_(s), layout_(layout), c_(run.config), value_(bytes_per_value(run.dtype)),
        // A VACE model without adapters trains its branch whole over its frozen base (fp8 allowed there).
        branch_(c_.has_vace() && !run.lora.enabled()),
        whole_(!run.lora.enabled() && !branch_),  // every weight trains: nothing to quantize or stream
        fp8_(s.fp8 && !whole_),
        share_(layout.sharded ? 1.0 / shard_ranks(layout) : 1.0),
        a_gpu_(layout.sharded ? fmt::format(" (1/{} a GPU)", shard_ranks(layout)) : ""),
        w_(weight_bytes(c_, value_, {fp8_, branch_})),
        critic_(run.critic ? weight_bytes(*run.critic, value_, {fp8_, false}) : WeightBytes{}) {}
  MemoryEstimate estimate();
 private:
  void device(const std::string& what, double bytes) {
    e_.device_parts.emplace_back(what, bytes);
    e_.device += bytes;
  }
  void host(const std::string& what, double bytes) {
    e_.host_parts.emplace_back(what, bytes);
    e_.host += bytes;
  }
  /// The compute dtype's bytes: the weights' under fp32 precision (a bf16 DiT computes in bf16).
  double compute_bytes() const { return layout_.dtype == at::kFloat ? value_ : 2.0; }
  /// What a parameter trained whole costs, and where.
  TrainedBytes whole_state() const;
  /// The share of the trained gradients the device holds at once: all of them; or, with the state
  /// on the host, one micro-batch a step and a strategy that leaves a unit's gradients final when
  /// its backward ends, two blocks' (one moving to the host, the next being computed) and those of
  /// the parameters in no block (they move when backward is over).
  double gradient_share() const;
  /// `parameters` of `what` trained (a share a GPU under sharding): with the state on the device one
  /// part; on the host the device's weights and gradients apart from the host's state.
  /// `streamed`: of them, those whose weights block swap streams from host memory (not on the device).
  void trained_state(const std::string& what, double parameters, const TrainedBytes& per, double streamed = 0);
  /// The DiTs trained whole: every parameter's training state (and a critic's frozen weights).
  void trained_whole();
  /// A frozen base (adapters, or a VACE branch trained whole beside it): the weights outside the
  /// blocks and the blocks as units, those block swap streams on the host.
  void frozen_base();
  /// A sharded step holds two blocks gathered (the current one and the prefetched next) and the rest
  /// of the model for the whole step, in the compute dtype; a DiT trained whole also holds a block's
  /// full gradient until it is reduce-scattered.
  void gathered();
  /// The graph of one network at a time (the largest that back-propagates), by the checkpointing options.
  void activations();
  /// A product dequantizes its fp8 weight (a float32 product, rounded to the compute dtype); the
  /// recomputation's and the backward's of the largest Linear can be alive together.
  void dequantized();

  const PlannedRun& run_;
  const MemorySettings& s_;
  const wanfw::TrainingLayout& layout_;
  const WanConfig& c_;
  const double value_;
  const bool branch_, whole_, fp8_;
  const double share_;
  const std::string a_gpu_;
  const WeightBytes w_, critic_;
  MemoryEstimate e_;
};

}  // namespace wan::estimate
