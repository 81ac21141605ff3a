// The one estimate (wan/memory_estimate.hpp): the weights and their training state, by the parts
// estimator.hpp declares; what a step computes with is in activation_estimate.cpp.

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "estimator.hpp"
#include "wan/fp8_weight.hpp"
#include "wanfw/parallel/unit_runtime.hpp"

namespace wan {

namespace estimate {

double power_of_two(double bytes) { return bytes <= 1 ? 1 : std::exp2(std::ceil(std::log2(bytes))); }

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

MemoryEstimate Estimator::estimate() {
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

TrainedBytes Estimator::whole_state() const {
  return trained_parameter_bytes(value_, layout_.master_weights, s_.host_state, layout_.sharded ? compute_bytes() : 0);
}

double Estimator::gradient_share() const {
  // fsdp moves each unit's reduced gradients as its backward ends, in the step's last micro-batch.
  if (!(s_.host_state && (layout_.unit_gradients_final || layout_.sharded) && layout_.accumulation == 1)) return 1.0;
  const double all = run_.models * (w_.rest_values + w_.block_values * static_cast<double>(c_.num_layers));
  return std::min(1.0, (2 * w_.block_values + run_.models * w_.rest_values) / all);
}

void Estimator::trained_state(const std::string& what, double parameters, const TrainedBytes& per, double streamed) {
  if (per.host == 0) {
    device(fmt::format("{} (weights, gradients, AdamW moments: {:g} bytes a parameter){}", what, per.device, a_gpu_),
           parameters * per.device * share_);
    return;
  }
  const double gradients = gradient_share();
  const double weight = per.device - per.gradient;
  const std::string weights = streamed > 0 ? "the resident blocks' weights" : "weights";
  device(gradients < 1 ? fmt::format("{}: {} ({:g} bytes a parameter) and two blocks' gradients{}", what, weights,
                                     weight, a_gpu_)
                       : fmt::format("{}: {} and gradients ({:g} bytes a parameter){}", what, weights, per.device,
                                     a_gpu_),
         ((parameters - streamed) * weight + parameters * per.gradient * gradients) * share_);
  host(fmt::format("{}: {}, gradients and AdamW moments ({:g} bytes a parameter; {} and gradients pinned)", what,
                   layout_.sharded ? "the shards" : "fp32 masters", per.host, layout_.sharded ? "shards" : "masters"),
       parameters * per.host * share_);
}

void Estimator::trained_whole() {
  const TrainedBytes per = whole_state();
  const double blocks = run_.models * static_cast<double>(c_.num_layers);
  const double parameters = run_.models * w_.rest_values + w_.block_values * blocks;
  // With the state on the host, block swap streams the trained blocks' weights too (and a critic's
  // frozen ones): the units in the order the model declares them, the runtime's choice of streamed.
  double streamed_trained = 0, streamed_frozen = 0, slot = 0;
  std::int64_t swapped = 0;
  if (per.host > 0 && !layout_.sharded && s_.swapped > 0) {
    const std::size_t dit_units = static_cast<std::size_t>(blocks);
    const std::size_t units = dit_units + (run_.critic ? static_cast<std::size_t>(run_.critic->num_layers) : 0);
    swapped = std::clamp<std::int64_t>(s_.swapped, 0, static_cast<std::int64_t>(units) - 1);
    const double weight = per.device - per.gradient;
    for (const std::size_t u : wanfw::streamed_units(units, static_cast<std::size_t>(swapped))) {
      const double bytes = u < dit_units ? w_.block_values * weight : critic_.block;
      (u < dit_units ? streamed_trained : streamed_frozen) += bytes;
      slot = std::max(slot, bytes);
    }
  }
  const double weight_bytes = per.device - per.gradient;
  if (per.host > 0)
    trained_state("the DiT trained whole", parameters, per, weight_bytes > 0 ? streamed_trained / weight_bytes : 0);
  else device(fmt::format("training state (weights, gradients, AdamW moments: {:g} bytes a parameter{})", per.device,
                          layout_.sharded ? fmt::format("; 1/{} of {:.2f} GiB", shard_ranks(layout_),
                                                        parameters * per.device / kGiB)
                                          : ""),
              parameters * per.device * share_);
  if (run_.critic) device(fmt::format("the critic's frozen weights in {}{}", run_.dtype, a_gpu_),
                          (critic_.rest + critic_.block * static_cast<double>(run_.critic->num_layers)) * share_ -
                              streamed_frozen);
  if (swapped > 0) {
    const std::int64_t slots = std::min(s_.ring, swapped);
    device(fmt::format("{} slot(s) of streamed blocks", slots), static_cast<double>(slots) * slot);
    host("streamed blocks' weights (pinned)", streamed_trained + streamed_frozen);
    // Built on the host first, whole, beside its masters; block swap copies the streamed blocks out
    // before the module's copies go; then the resident part moves.
    e_.host_build = e_.host + parameters * value_ +
                    (run_.critic ? critic_.rest + critic_.block * static_cast<double>(run_.critic->num_layers) : 0.0);
  }
}

void Estimator::frozen_base() {
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

}  // namespace estimate

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
  const estimate::WeightBytes w = estimate::weight_bytes(config, bytes_per_value(dtype), {fp8, false});
  double vace = w.vace_embedding;
  for (const double block : w.vace_blocks) vace += block;
  return w.rest + w.block * static_cast<double>(config.num_layers) + vace;
}

MemoryEstimate estimate_memory(const PlannedRun& run, const MemorySettings& s, const wanfw::TrainingLayout& layout) {
  return estimate::Estimator(run, s, layout).estimate();
}

}  // namespace wan
