#include "wan/memory_estimate.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "wan/fp8_weight.hpp"
#include "wanfw/parallel/unit_runtime.hpp"

namespace wan {

namespace {

/// The smallest power of two at least `bytes` (the CUDA host allocator's block for a pinned tensor).
double power_of_two(double bytes) { return bytes <= 1 ? 1 : std::exp2(std::ceil(std::log2(bytes))); }

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
WeightBytes weight_bytes(const WanConfig& c, double value_bytes, const BaseStorage& storage) {
  WeightBytes out;
  out.vace_blocks.assign(c.vace_layers.size(), 0.0);
  for (const ParameterSpec& p : c.parameters()) {
    const double numel = static_cast<double>(p.numel());
    const double bytes = storage.fp8_parameter(p) ? fp8_stored_bytes(p.shape) : numel * value_bytes;
    switch (p.place) {
      case ParameterPlace::Block:
        if (p.block != 0) break;  // every block has block 0's parameters
        out.block_values += numel;
        out.block += bytes;
        break;
      case ParameterPlace::VaceBlock:
        out.vace_blocks.at(static_cast<std::size_t>(p.block)) += bytes;
        break;
      case ParameterPlace::VaceEmbedding:
        out.vace_embedding += bytes;
        break;
      case ParameterPlace::Rest:
        out.rest_values += numel;
        out.rest += bytes;
        break;
    }
  }
  return out;
}

/// The activation formula, written once: for `tokens` a rank, a checkpointed block keeps its input
/// (dim values a token) and a block that runs (or recomputes) for backward holds what
/// recomputed_block_bytes counts; `a` bytes a value. `all` (no checkpointing): every block keeps
/// its activations, whole.
struct BlockActivations {
  double input = 0, recompute = 0, all = 0, layers = 0;
  double most() const { return layers * (input + recompute); }
};

BlockActivations block_activations(const WanConfig& c, double tokens, double a, std::int64_t chunks, bool split) {
  const double layers = static_cast<double>(c.num_layers + std::ssize(c.vace_layers));  // VACE blocks are blocks
  return {tokens * static_cast<double>(c.dim) * a, recomputed_block_bytes(c, tokens, a, chunks, split),
          layers * recomputed_block_bytes(c, tokens, a, 1, split), layers};
}

double tokens_of(const WanConfig& c, const std::vector<std::int64_t>& latent) {
  const auto& p = c.patch;
  return static_cast<double>((latent[0] / p[0]) * (latent[1] / p[1]) * (latent[2] / p[2]));
}

}  // namespace

double recomputed_block_bytes(const WanConfig& c, double tokens, double value_bytes, std::int64_t chunks, bool split) {
  const double dim = static_cast<double>(c.dim), ffn = static_cast<double>(c.ffn_dim);
  const double per_token = 24 * dim + 2 * ffn;
  const double n = std::clamp(static_cast<double>(chunks), 1.0, std::max(1.0, tokens));
  if (n <= 1) return tokens * per_token * value_bytes;
  // The self-attention's backward over every token (queries, keys, values, output and their
  // gradients, the input's gradient: 11 dim), or a chunk's rest of the block beside the queries,
  // keys, values, output and two gradients (8 dim); a split sequence adds its exchanged queries,
  // keys and values to both.
  const double exchanged = split ? 3 * dim : 0;
  return tokens * (exchanged + std::max(11 * dim, 8 * dim + per_token / n)) * value_bytes;
}

double frozen_dit_bytes(const WanConfig& config, const std::string& dtype, bool fp8) {
  const WeightBytes w = weight_bytes(config, bytes_per_value(dtype), {fp8, false});
  double vace = w.vace_embedding;
  for (const double block : w.vace_blocks) vace += block;
  return w.rest + w.block * static_cast<double>(config.num_layers) + vace;
}

namespace {

/// One estimate in parts, each a member below, added in the order the plan prints them: the
/// weights and their training state, the networks held beside them, what a sharded step gathers,
/// the activations, and the fp8 products' and the allocator's extra.
class Estimator {
 public:
  Estimator(const PlannedRun& run, const MemorySettings& s, const wanfw::TrainingLayout& layout)
      : run_(run), s_(s), layout_(layout), c_(run.config), value_(bytes_per_value(run.dtype)),
        // A VACE model without adapters trains its branch whole over its frozen base (fp8 allowed there).
        branch_(c_.has_vace() && !run.lora.enabled()),
        whole_(!run.lora.enabled() && !branch_),  // every weight trains: nothing to quantize or stream
        fp8_(s.fp8 && !whole_),
        share_(layout.sharded ? 1.0 / std::max(1, layout.gpus) : 1.0),
        a_gpu_(layout.sharded ? fmt::format(" (1/{} a GPU)", layout.gpus) : ""),
        w_(weight_bytes(c_, value_, {fp8_, branch_})),
        critic_(run.critic ? weight_bytes(*run.critic, value_, {fp8_, false}) : WeightBytes{}) {}

  MemoryEstimate estimate() {
    if (whole_) trained_whole();
    else frozen_base();
    for (const HeldNetwork& held : run_.held) {
      if (held.trained > 0) trained_state(held.what, held.trained, whole_state());
      else device(held.what + (held.in_module ? a_gpu_ : ""), held.in_module ? held.bytes * share_ : held.bytes);
    }
    const double adapters = static_cast<double>(adapter_parameter_count(c_, run_.lora) * run_.models +
                                                run_.more_adapters + run_.critic_adapters);
    if (s_.host_state && adapters > 0)
      trained_state("adapters (float32)", adapters,
                    trained_parameter_bytes(4, false, true, layout_.sharded ? (layout_.dtype == at::kFloat ? 4 : 2) : 0));
    else device(fmt::format("adapters with gradients and AdamW moments (float32){}", a_gpu_), adapters * 16 * share_);
    if (layout_.sharded) gathered();
    if (layout_.latent.size() == 3) activations();
    if (fp8_) dequantized();
    device("CUDA workspaces and allocator slack", kAllocatorSlack);
    return e_;
  }

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
  TrainedBytes whole_state() const {
    return trained_parameter_bytes(value_, layout_.master_weights, s_.host_state, layout_.sharded ? compute_bytes() : 0);
  }
  /// The share of the trained gradients the device holds at once: all of them; or, with the state
  /// on the host, one micro-batch a step and a strategy that leaves a unit's gradients final when
  /// its backward ends, two blocks' (one moving to the host, the next being computed) and those of
  /// the parameters in no block (they move when backward is over).
  double gradient_share() const {
    // fsdp moves each unit's reduced gradients as its backward ends, in the step's last micro-batch.
    if (!(s_.host_state && (layout_.unit_gradients_final || layout_.sharded) && layout_.accumulation == 1)) return 1.0;
    const double all = run_.models * (w_.rest_values + w_.block_values * static_cast<double>(c_.num_layers));
    return std::min(1.0, (2 * w_.block_values + run_.models * w_.rest_values) / all);
  }
  /// `parameters` of `what` trained (a share a GPU under sharding): with the state on the device one
  /// part; on the host the device's weights and gradients apart from the host's state.
  void trained_state(const std::string& what, double parameters, const TrainedBytes& per) {
    if (per.host == 0) {
      device(fmt::format("{} (weights, gradients, AdamW moments: {:g} bytes a parameter){}", what, per.device, a_gpu_),
             parameters * per.device * share_);
      return;
    }
    const double gradients = gradient_share();
    const double weight = per.device - per.gradient;
    device(gradients < 1 ? fmt::format("{}: weights ({:g} bytes a parameter) and two blocks' gradients{}", what,
                                       weight, a_gpu_)
                         : fmt::format("{}: weights and gradients ({:g} bytes a parameter){}", what, per.device, a_gpu_),
           parameters * (weight + per.gradient * gradients) * share_);
    host(fmt::format("{}: {}, gradients and AdamW moments ({:g} bytes a parameter; {} and gradients pinned)", what,
                     layout_.sharded ? "the shards" : "fp32 masters", per.host, layout_.sharded ? "shards" : "masters"),
         parameters * per.host * share_);
  }

  /// The DiTs trained whole: every parameter's training state (and a critic's frozen weights).
  void trained_whole() {
    const TrainedBytes per = whole_state();
    const double parameters = run_.models * (w_.rest_values + w_.block_values * static_cast<double>(c_.num_layers));
    if (per.host > 0) trained_state("the DiT trained whole", parameters, per);
    else device(fmt::format("training state (weights, gradients, AdamW moments: {:g} bytes a parameter{})", per.device,
                            layout_.sharded ? fmt::format("; 1/{} of {:.2f} GiB", layout_.gpus,
                                                          parameters * per.device / kGiB)
                                            : ""),
                parameters * per.device * share_);
    if (run_.critic) device(fmt::format("the critic's frozen weights in {}{}", run_.dtype, a_gpu_),
                            (critic_.rest + critic_.block * static_cast<double>(run_.critic->num_layers)) * share_);
  }

  /// A frozen base (adapters, or a VACE branch trained whole beside it): the weights outside the
  /// blocks and the blocks as units, those block swap streams on the host.
  void frozen_base() {
    if (branch_) trained_state("the VACE branch's training state", run_.models * static_cast<double>(c_.vace_parameter_count()),
                               whole_state());
    // The units in the order the model declares them: each DiT's blocks and VACE blocks, then a
    // critic's; block swap streams the ones wanfw::streamed_units names, as the runtime does (a
    // branch trained whole streams none).
    std::vector<double> units;
    for (int m = 0; m < run_.models; ++m) {
      units.insert(units.end(), static_cast<std::size_t>(c_.num_layers), w_.block);
      if (!branch_) units.insert(units.end(), w_.vace_blocks.begin(), w_.vace_blocks.end());
    }
    if (run_.critic) units.insert(units.end(), static_cast<std::size_t>(run_.critic->num_layers), critic_.block);
    const std::size_t swapped =
        branch_ ? 0 : static_cast<std::size_t>(std::clamp<std::int64_t>(s_.swapped, 0, std::ssize(units)));
    double streamed = 0, slot = 0, all_blocks = 0;
    for (const std::size_t u : wanfw::streamed_units(units.size(), swapped)) {
      streamed += units[u];
      slot = std::max(slot, units[u]);
    }
    for (const double bytes : units) all_blocks += bytes;
    const double rest = run_.models * (w_.rest + (branch_ ? 0.0 : w_.vace_embedding)) + critic_.rest;
    device(fmt::format("weights outside the blocks in {}{}", run_.dtype, a_gpu_), rest * share_);
    device(fmt::format("{} resident block(s) in {}{}", units.size() - swapped, fp8_ ? "fp8 with scales" : run_.dtype,
                       a_gpu_),
           (all_blocks - streamed) * share_);
    if (swapped > 0) {
      const std::int64_t slots = std::min<std::int64_t>(s_.ring, static_cast<std::int64_t>(swapped));
      device(fmt::format("{} slot(s) of streamed blocks", slots), static_cast<double>(slots) * slot);
      host("streamed blocks' weights (pinned)", streamed);
      e_.host_build = rest + all_blocks;  // the model is built on the host first, whole, in its storage dtype
    }
  }

  /// A sharded step holds two blocks gathered (the current one and the prefetched next) and the rest
  /// of the model for the whole step, in the compute dtype; a DiT trained whole also holds a block's
  /// full gradient until it is reduce-scattered.
  void gathered() {
    const double gathered = (2 * w_.block_values + w_.rest_values) * compute_bytes();
    device(whole_ ? "gathered parameters (two blocks and the rest) and a block's full gradient"
                  : "gathered parameters (two blocks and the rest)",
           gathered + (whole_ ? (w_.block_values + w_.rest_values) * compute_bytes() : 0.0));
  }

  /// The graph of one network at a time (the largest that back-propagates), by the checkpointing options.
  void activations() {
    const double tokens = tokens_of(c_, layout_.latent);
    const double per_rank = tokens * static_cast<double>(layout_.batch_size) / layout_.sequence_parallel;
    const double a = compute_bytes();
    e_.activations = fmt::format("latents {}x{}x{}: {} tokens x batch {}{}", layout_.latent[0], layout_.latent[1],
                                 layout_.latent[2], with_thousands(static_cast<std::int64_t>(tokens)),
                                 layout_.batch_size,
                                 layout_.sequence_parallel > 1 ? fmt::format(", 1/{} a GPU", layout_.sequence_parallel)
                                                               : "");
    const std::int64_t chunks = s_.checkpointing ? s_.chunks : 1;
    const bool split = layout_.sequence_parallel > 1;
    BlockActivations act = block_activations(c_, per_rank, a, chunks, split);
    for (const auto& other : {run_.critic, run_.held_graph})
      if (other && block_activations(*other, per_rank, a, chunks, split).most() > act.most())
        act = block_activations(*other, per_rank, a, chunks, split);
    const int layers = static_cast<int>(act.layers);
    const std::string in_chunks = chunks > 1 ? fmt::format(" in {} chunks of tokens", chunks) : std::string();
    if (!s_.checkpointing) {
      device("activations of every block, kept for backward", act.all);
    } else if (!s_.offload) {
      device(fmt::format("{} checkpointed block inputs", layers), act.layers * act.input);
      device("one block recomputed" + in_chunks, act.recompute);
    } else {
      device("one block's input back from the host, and the block recomputed" + in_chunks, act.input + act.recompute);
      host(fmt::format("{} checkpointed block inputs (pinned, each rounded up to a power of two)", layers),
           act.layers * power_of_two(act.input));
    }
    if (run_.task == Task::TI2V) device("the per-token time embedding (ti2v)", 7 * act.input);
    if (c_.has_vace()) device("the VACE branch's embedded context and a hint", 2 * act.input);
  }

  /// A product dequantizes its fp8 weight (a float32 product, rounded to the compute dtype); the
  /// recomputation's and the backward's of the largest Linear can be alive together.
  void dequantized() {
    std::int64_t largest = std::max(c_.ffn_dim * c_.dim, c_.dim * c_.dim);
    if (run_.critic)
      largest = std::max({largest, run_.critic->ffn_dim * run_.critic->dim, run_.critic->dim * run_.critic->dim});
    device("dequantized copies of the largest Linear weight (fp8)", 2 * static_cast<double>(largest) * (4 + value_));
  }

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

}  // namespace

MemoryEstimate estimate_memory(const PlannedRun& run, const MemorySettings& s, const wanfw::TrainingLayout& layout) {
  return Estimator(run, s, layout).estimate();
}

}  // namespace wan
