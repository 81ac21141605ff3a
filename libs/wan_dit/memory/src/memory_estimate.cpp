#include "wan/memory_estimate.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "wanfw/unit_runtime.hpp"

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
  double vace_values = 0;                   ///< parameters of the branch (its blocks and patch embedding)
  double vace_embedding = 0;                ///< bytes of the context's patch embedding
};

WeightBytes weight_bytes(const WanConfig& c, double value_bytes, bool fp8, bool fp8_vace) {
  WeightBytes out;
  out.vace_blocks.assign(c.vace_layers.size(), 0.0);
  double all = 0;
  const auto stored = [&](const std::vector<std::int64_t>& shape, const std::string& name, double numel, bool quantized) {
    const bool linear = shape.size() == 2 && name.ends_with(".weight") && !name.ends_with("_proj.weight");
    if (!(quantized && linear)) return numel * value_bytes;
    const double out_features = static_cast<double>(shape[0]);
    const double scales = shape[1] % 64 == 0 ? out_features * static_cast<double>(shape[1] / 64) : out_features;
    return numel + 4 * scales;  // e4m3 values, float32 scales
  };
  for (const auto& [name, shape] : c.parameter_shapes()) {
    double numel = 1;
    for (const std::int64_t d : shape) numel *= static_cast<double>(d);
    all += numel;
    if (name.rfind("vace_", 0) == 0) {
      out.vace_values += numel;
      if (name.rfind("vace_blocks.", 0) == 0)
        out.vace_blocks.at(std::stoul(name.substr(12))) += stored(shape, name, numel, fp8_vace);
      else
        out.vace_embedding += numel * value_bytes;
      continue;
    }
    if (name.rfind("blocks.0.", 0) != 0) continue;
    out.block_values += numel;
    out.block += stored(shape, name, numel, fp8);
  }
  out.rest_values = all - out.block_values * static_cast<double>(c.num_layers) - out.vace_values;
  out.rest = out.rest_values * value_bytes;
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

TrainedBytes trained_parameter_bytes(double value_bytes, bool master_weights) {
  if (master_weights) return {16, "bf16 weight 2 + bf16 gradient 2 + fp32 master weight 4 + fp32 AdamW moments 8"};
  const char* type = value_bytes == 4 ? "fp32" : "bf16";
  return {4 * value_bytes, fmt::format("{} weight {:g} + gradient {:g} + AdamW moments {:g}", type, value_bytes,
                                       value_bytes, 2 * value_bytes)};
}

double frozen_dit_bytes(const WanConfig& config, const std::string& dtype, bool fp8) {
  const WeightBytes w = weight_bytes(config, bytes_per_value(dtype), fp8, fp8);
  double vace = w.vace_embedding;
  for (const double block : w.vace_blocks) vace += block;
  return w.rest + w.block * static_cast<double>(config.num_layers) + vace;
}

double dit_state_bytes(const WanConfig& config, const LoraSettings& lora, const std::string& dtype) {
  const double value = bytes_per_value(dtype), weights = static_cast<double>(config.parameter_count());
  if (!lora.enabled()) return weights * trained_parameter_bytes(value, false).bytes;
  return weights * value +
         static_cast<double>(adapter_parameter_count(config, lora)) * trained_parameter_bytes(4, false).bytes;
}

MemoryEstimate estimate_memory(const PlannedRun& run, const MemorySettings& s, const wanfw::TrainingLayout& layout) {
  const WanConfig& c = run.config;
  const double value = bytes_per_value(run.dtype);
  // A VACE model without adapters trains its branch whole over its frozen base (fp8 allowed there).
  const bool branch = c.has_vace() && !run.lora.enabled();
  const bool whole = !run.lora.enabled() && !branch;  // the DiTs train every weight: nothing to quantize or stream
  const bool fp8 = s.fp8 && !whole;
  const double share = layout.sharded ? 1.0 / std::max(1, layout.gpus) : 1.0;
  const std::string a_gpu = layout.sharded ? fmt::format(" (1/{} a GPU)", layout.gpus) : "";
  const WeightBytes w = weight_bytes(c, value, fp8, fp8 && !branch);
  const WeightBytes critic = run.critic ? weight_bytes(*run.critic, value, fp8, fp8) : WeightBytes{};
  // The units in the order the model declares them: each DiT's blocks and VACE blocks, then a
  // critic's; block swap streams the ones wanfw::streamed_units names, as the runtime does (a
  // branch trained whole streams none).
  std::vector<double> units;
  for (int m = 0; m < run.models; ++m) {
    units.insert(units.end(), static_cast<std::size_t>(c.num_layers), w.block);
    if (!branch) units.insert(units.end(), w.vace_blocks.begin(), w.vace_blocks.end());
  }
  if (run.critic) units.insert(units.end(), static_cast<std::size_t>(run.critic->num_layers), critic.block);
  const std::size_t swapped =
      whole || branch ? 0 : static_cast<std::size_t>(std::clamp<std::int64_t>(s.swapped, 0, std::ssize(units)));
  double streamed = 0, slot = 0, all_blocks = 0;
  for (const std::size_t u : wanfw::streamed_units(units.size(), swapped)) {
    streamed += units[u];
    slot = std::max(slot, units[u]);
  }
  for (const double bytes : units) all_blocks += bytes;
  MemoryEstimate e;
  const auto device = [&](const std::string& what, double bytes) {
    e.device_parts.emplace_back(what, bytes);
    e.device += bytes;
  };
  const auto host = [&](const std::string& what, double bytes) {
    e.host_parts.emplace_back(what, bytes);
    e.host += bytes;
  };
  const double dit_values = w.rest_values + w.block_values * static_cast<double>(c.num_layers);
  if (whole) {
    const TrainedBytes per = trained_parameter_bytes(value, layout.master_weights);
    const double state = run.models * dit_values * per.bytes;
    device(fmt::format("training state (weights, gradients, AdamW moments: {:g} bytes a parameter{})", per.bytes,
                       layout.sharded ? fmt::format("; 1/{} of {:.2f} GiB", layout.gpus, state / kGiB) : ""),
           state * share);
    if (run.critic) device(fmt::format("the critic's frozen weights in {}{}", run.dtype, a_gpu),
                           (critic.rest + critic.block * static_cast<double>(run.critic->num_layers)) * share);
  } else {
    if (branch) {  // the branch's training state, beside the frozen base below
      const TrainedBytes per = trained_parameter_bytes(value, layout.master_weights);
      device(fmt::format("the VACE branch's training state (weights, gradients, AdamW moments: {:g} bytes a "
                         "parameter){}", per.bytes, a_gpu),
             run.models * w.vace_values * per.bytes * share);
    }
    const double rest = run.models * (w.rest + (branch ? 0.0 : w.vace_embedding)) + critic.rest;
    device(fmt::format("weights outside the blocks in {}{}", run.dtype, a_gpu), rest * share);
    device(fmt::format("{} resident block(s) in {}{}", units.size() - swapped, fp8 ? "fp8 with scales" : run.dtype, a_gpu),
           (all_blocks - streamed) * share);
    if (swapped > 0) {
      const std::int64_t slots = std::min<std::int64_t>(s.ring, static_cast<std::int64_t>(swapped));
      device(fmt::format("{} slot(s) of streamed blocks", slots), static_cast<double>(slots) * slot);
      host("streamed blocks' weights (pinned)", streamed);
      e.host_build = rest + all_blocks;  // the model is built on the host first, whole, in its storage dtype
    }
  }
  for (const HeldNetwork& held : run.held)
    device(held.what + (held.in_module ? a_gpu : ""), held.in_module ? held.bytes * share : held.bytes);
  const double adapters = static_cast<double>(adapter_parameter_count(c, run.lora) * run.models + run.more_adapters +
                                              run.critic_adapters);
  device(fmt::format("adapters with gradients and AdamW moments (float32){}", a_gpu), adapters * 16 * share);
  if (layout.sharded) {
    // A sharded step holds two blocks gathered (the current one and the prefetched next) and the
    // rest of the model for the whole step, in the compute dtype; a DiT trained whole also holds a
    // block's full gradient until it is reduce-scattered.
    const double compute = layout.dtype == at::kFloat ? value : 2.0;
    const double gathered = (2 * w.block_values + w.rest_values) * compute;
    device(whole ? "gathered parameters (two blocks and the rest) and a block's full gradient"
                 : "gathered parameters (two blocks and the rest)",
           gathered + (whole ? (w.block_values + w.rest_values) * compute : 0.0));
  }

  if (layout.latent.size() == 3) {
    const double tokens = tokens_of(c, layout.latent);
    const double per_rank = tokens * static_cast<double>(layout.batch_size) / layout.sequence_parallel;
    // Activations take the compute dtype: the weights' under fp32 precision (a bf16 DiT computes in bf16).
    const double a = layout.dtype == at::kFloat ? value : 2.0;
    e.activations = fmt::format("latents {}x{}x{}: {} tokens x batch {}{}", layout.latent[0], layout.latent[1],
                                layout.latent[2], with_thousands(static_cast<std::int64_t>(tokens)), layout.batch_size,
                                layout.sequence_parallel > 1 ? fmt::format(", 1/{} a GPU", layout.sequence_parallel) : "");
    // A step keeps the graph of one network at a time: the largest one that back-propagates.
    const std::int64_t chunks = s.checkpointing ? s.chunks : 1;
    const bool split = layout.sequence_parallel > 1;
    BlockActivations act = block_activations(c, per_rank, a, chunks, split);
    for (const auto& other : {run.critic, run.held_graph})
      if (other && block_activations(*other, per_rank, a, chunks, split).most() > act.most())
        act = block_activations(*other, per_rank, a, chunks, split);
    const int layers = static_cast<int>(act.layers);
    const std::string in_chunks = chunks > 1 ? fmt::format(" in {} chunks of tokens", chunks) : std::string();
    if (!s.checkpointing) {
      device("activations of every block, kept for backward", act.all);
    } else if (!s.offload) {
      device(fmt::format("{} checkpointed block inputs", layers), act.layers * act.input);
      device("one block recomputed" + in_chunks, act.recompute);
    } else {
      device("one block's input back from the host, and the block recomputed" + in_chunks, act.input + act.recompute);
      host(fmt::format("{} checkpointed block inputs (pinned, each rounded up to a power of two)", layers),
           act.layers * power_of_two(act.input));
    }
    if (run.task == Task::TI2V) device("the per-token time embedding (ti2v)", 7 * act.input);
    if (c.has_vace()) device("the VACE branch's embedded context and a hint", 2 * act.input);
  }
  if (fp8) {
    // A product dequantizes its weight (a float32 product, rounded to the compute dtype); the
    // recomputation's and the backward's of the largest Linear can be alive together.
    std::int64_t largest = std::max(c.ffn_dim * c.dim, c.dim * c.dim);
    if (run.critic) largest = std::max({largest, run.critic->ffn_dim * run.critic->dim, run.critic->dim * run.critic->dim});
    device("dequantized copies of the largest Linear weight (fp8)", 2 * static_cast<double>(largest) * (4 + value));
  }
  device("CUDA workspaces and allocator slack", kAllocatorSlack);
  return e;
}

bool fits(const MemoryEstimate& e, double device_bytes, double host_bytes) {
  return e.device + kDeviceReserve <= device_bytes &&
         (host_bytes <= 0 || std::max(e.host, e.host_build) <= host_bytes);
}

std::string device_fit(const MemoryEstimate& e) {
  std::string out;
  for (const double gb : {12.0, 16.0, 24.0, 48.0, 80.0}) {
    const bool fit = fits(e, gb * 1e9);
    out += fmt::format("{}{} a{} {:g} GB GPU{}", out.empty() ? "" : "; ", fit ? "fits" : "does not fit",
                       gb == 80 ? "n" : "", gb,
                       fit ? fmt::format(" ({:.1f} GiB left)", (gb * 1e9 - e.device - kDeviceReserve) / kGiB) : "");
  }
  return out;
}

}  // namespace wan
