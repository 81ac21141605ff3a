#include "wan/memory_plan.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "wan/gpu_memory.hpp"

namespace wan {

namespace {

double gib(double bytes) { return bytes / kGiB; }

/// The smallest power of two at least `bytes` (the CUDA host allocator's block for a pinned tensor).
double power_of_two(double bytes) { return bytes <= 1 ? 1 : std::exp2(std::ceil(std::log2(bytes))); }

/// One block's bytes, and the rest of the DiT's, in the weights' storage.
struct WeightBytes {
  double block = 0;  ///< one block's frozen parameters (fp8 Linear weights with scales, or all in dtype)
  double rest = 0;   ///< embeddings, time projection, head
};

WeightBytes weight_bytes(const WanConfig& c, double value_bytes, bool fp8) {
  WeightBytes out;
  double all = 0, block_numel = 0;
  for (const auto& [name, shape] : c.parameter_shapes()) {
    double numel = 1;
    for (const std::int64_t d : shape) numel *= static_cast<double>(d);
    all += numel;
    if (name.rfind("blocks.0.", 0) != 0) continue;
    block_numel += numel;
    const bool linear = shape.size() == 2 && name.ends_with(".weight");
    if (fp8 && linear) {
      const double out_features = static_cast<double>(shape[0]);
      const double scales = shape[1] % 64 == 0 ? out_features * static_cast<double>(shape[1] / 64) : out_features;
      out.block += numel + 4 * scales;  // e4m3 values, float32 scales
    } else {
      out.block += numel * value_bytes;
    }
  }
  out.rest = (all - block_numel * static_cast<double>(c.num_layers)) * value_bytes;
  return out;
}

std::string settings_text(const MemorySettings& s) {
  std::vector<std::string> parts;
  if (s.fp8) parts.push_back("fp8 base");
  if (s.checkpointing) parts.push_back("checkpointing");
  if (s.offload) parts.push_back("activation offload");
  if (s.swapped > 0) parts.push_back(fmt::format("{} blocks swapped (ring {})", s.swapped, s.ring));
  if (parts.empty()) return "none";
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

/// "fits a 12 GB GPU (0.3 GiB left); ...; does not fit a 16 GB GPU" for the common sizes.
std::string device_fit(double bytes) {
  std::string out;
  for (const double gb : {12.0, 16.0, 24.0, 48.0, 80.0}) {
    const double left = (gb * 1e9 - bytes) / kGiB;
    out += fmt::format("{}{} a{} {:g} GB GPU{}", out.empty() ? "" : "; ", left > 0 ? "fits" : "does not fit",
                       gb == 80 ? "n" : "", gb, left > 0 ? fmt::format(" ({:.1f} GiB left)", left) : "");
  }
  return out;
}

bool fits(const MemoryEstimate& e, const wanfw::TrainingLayout& layout) {
  return e.device + kDeviceReserve <= layout.fit_device_bytes &&
         (layout.fit_host_bytes <= 0 || std::max(e.host, e.host_build) <= layout.fit_host_bytes);
}

/// One block's bytes before its recomputation, and during it: a block's input and the tensors a
/// recomputed block holds, for `tokens` a rank.
struct BlockActivations {
  double input = 0, recompute = 0, layers = 0;
};

BlockActivations block_activations(const WanConfig& c, double tokens, double a) {
  const double dim = static_cast<double>(c.dim), ffn = static_cast<double>(c.ffn_dim);
  return {tokens * dim * a, tokens * (24 * dim + 2 * ffn) * a, static_cast<double>(c.num_layers)};
}

}  // namespace

double frozen_dit_bytes(const WanConfig& config, const std::string& dtype, bool fp8) {
  const WeightBytes w = weight_bytes(config, bytes_per_value(dtype), fp8);
  return w.rest + w.block * static_cast<double>(config.num_layers);
}

MemoryEstimate estimate_memory(const PlannedRun& run, const MemorySettings& s, const wanfw::TrainingLayout& layout) {
  const WanConfig& c = run.config;
  const double value = bytes_per_value(run.dtype);
  const WeightBytes w = weight_bytes(c, value, s.fp8);
  const WeightBytes critic = run.critic ? weight_bytes(*run.critic, value, s.fp8) : WeightBytes{};
  // The units in the order the model declares them: the DiTs' blocks, then a critic's.
  std::vector<double> units(static_cast<std::size_t>(c.num_layers * run.models), w.block);
  if (run.critic) units.insert(units.end(), static_cast<std::size_t>(run.critic->num_layers), critic.block);
  double streamed = 0, slot = 0, all_blocks = 0;
  const std::size_t swapped = static_cast<std::size_t>(std::min<std::int64_t>(s.swapped, std::ssize(units)));
  for (std::size_t k = 0; k < swapped; ++k) {  // block swap's spread: unit floor((2k+1)N/2S)
    const double bytes = units[(2 * k + 1) * units.size() / (2 * swapped)];
    streamed += bytes;
    slot = std::max(slot, bytes);
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
  const double rest = run.models * w.rest + critic.rest;
  device(fmt::format("weights outside the blocks in {}", run.dtype), rest);
  device(fmt::format("{} resident block(s) in {}", units.size() - swapped, s.fp8 ? "fp8 with scales" : run.dtype),
         all_blocks - streamed);
  if (swapped > 0) {
    const std::int64_t slots = std::min<std::int64_t>(s.ring, static_cast<std::int64_t>(swapped));
    device(fmt::format("{} slot(s) of streamed blocks", slots), static_cast<double>(slots) * slot);
    host("streamed blocks' weights (pinned)", streamed);
  }
  for (const auto& [what, bytes] : run.held) device(what, bytes);
  const double adapters = static_cast<double>(adapter_parameter_count(c, run.lora) * run.models + run.more_adapters +
                                              run.critic_adapters);
  device("adapters with gradients and AdamW moments (float32)", adapters * 16);

  if (layout.latent.size() == 3) {
    const auto& p = c.patch;
    const double tokens =
        static_cast<double>((layout.latent[0] / p[0]) * (layout.latent[1] / p[1]) * (layout.latent[2] / p[2]));
    const double per_rank = tokens * static_cast<double>(layout.batch_size) / layout.sequence_parallel;
    const double a = layout.dtype == at::kFloat ? 4.0 : 2.0;
    // A step keeps the graph of one network at a time: the largest one that back-propagates.
    BlockActivations act = block_activations(c, per_rank, a);
    for (const auto& other : {run.critic, run.held_graph}) {
      if (!other) continue;
      const BlockActivations b = block_activations(*other, per_rank, a);
      if (b.layers * (b.input + b.recompute) > act.layers * (act.input + act.recompute)) act = b;
    }
    const int layers = static_cast<int>(act.layers);
    if (!s.checkpointing) {
      device("activations of every block, kept for backward", act.layers * act.recompute);
    } else if (!s.offload) {
      device(fmt::format("{} checkpointed block inputs", layers), act.layers * act.input);
      device("one block recomputed", act.recompute);
    } else {
      device("one block's input back from the host, and the block recomputed", act.input + act.recompute);
      host(fmt::format("{} checkpointed block inputs (pinned, each rounded up to a power of two)", layers),
           act.layers * power_of_two(act.input));
    }
    if (run.task == Task::TI2V) device("the per-token time embedding (ti2v)", 7 * act.input);
  }
  if (s.fp8) {
    // A product dequantizes its weight (a float32 product, rounded to the compute dtype); the
    // recomputation's and the backward's of the largest Linear can be alive together.
    std::int64_t largest = std::max(c.ffn_dim * c.dim, c.dim * c.dim);
    if (run.critic) largest = std::max({largest, run.critic->ffn_dim * run.critic->dim, run.critic->dim * run.critic->dim});
    device("dequantized copies of the largest Linear weight (fp8)", 2 * static_cast<double>(largest) * (4 + value));
  }
  device("CUDA workspaces and allocator slack", kAllocatorSlack);
  // Blocks streamed from the host: the model is built there first, whole, in its storage dtype.
  if (swapped > 0) e.host_build = rest + all_blocks;
  return e;
}

MemorySettings configured_memory(const wanfw::Options& o, const wanfw::TrainingLayout& layout) {
  MemorySettings s;
  s.fp8 = o.string("base_dtype") == "float8_e4m3fn";
  s.checkpointing = o.boolean("gradient_checkpointing");
  s.offload = o.boolean("activation_offload");
  s.swapped = layout.swapped_blocks;
  s.ring = layout.swap_ring;
  return s;
}

std::string memory_plan(const PlannedRun& run, const MemorySettings& configured, const wanfw::TrainingLayout& layout) {
  if (layout.sharded || !run.lora.enabled()) return "";
  const auto line = [&](const MemorySettings& s) {
    const MemoryEstimate e = estimate_memory(run, s, layout);
    std::string text = fmt::format("device {:.2f} GiB, host {:.2f} GiB", gib(e.device), gib(e.host));
    if (e.host_build > e.host) text += fmt::format(" ({:.2f} GiB while building)", gib(e.host_build));
    return text;
  };
  const MemoryEstimate now = estimate_memory(run, configured, layout);
  std::string out = fmt::format("memory plan per rank ({}):\n", settings_text(configured));
  for (const auto& [what, bytes] : now.device_parts)
    if (bytes > 0) out += fmt::format("  device: {} {:.2f} GiB\n", what, gib(bytes));
  for (const auto& [what, bytes] : now.host_parts) out += fmt::format("  host: {} {:.2f} GiB\n", what, gib(bytes));
  out += fmt::format("  total: {}; with {:.1f} GiB for the CUDA context: {}\n", line(configured),
                     gib(kDeviceReserve), device_fit(now.device + kDeviceReserve));
  const std::int64_t units = run.config.num_layers * run.models + (run.critic ? run.critic->num_layers : 0);
  std::vector<std::pair<std::string, MemorySettings>> variants;
  MemorySettings v = configured;
  v.fp8 = !configured.fp8;
  variants.emplace_back(configured.fp8 ? "base in dtype" : "fp8 base", v);
  v = configured;
  v.checkpointing = true;
  v.offload = !(configured.checkpointing && configured.offload);
  variants.emplace_back(v.offload ? "activation offload" : "no activation offload", v);
  v = configured;
  v.checkpointing = true;
  v.swapped = configured.swapped > 0 ? 0 : units / 2;
  variants.emplace_back(v.swapped > 0 ? fmt::format("{} blocks swapped", v.swapped) : "no block swap", v);
  for (const auto& [name, settings] : variants) out += fmt::format("  with {}: {}\n", name, line(settings));
  if (layout.fit_device_bytes <= 0) return out;

  // The fewest changes that fit, cheapest first: fp8, checkpointing, offload, then the fewest swapped blocks.
  const std::string budget = fmt::format("{:.2f} GiB of device memory{}", gib(layout.fit_device_bytes),
                                         layout.fit_host_bytes > 0
                                             ? fmt::format(" and {:.2f} GiB of host memory", gib(layout.fit_host_bytes))
                                             : std::string());
  MemorySettings s = configured;
  std::vector<MemorySettings> steps{s};
  for (const auto change : {0, 1, 2}) {
    if (change == 0) s.fp8 = true;
    if (change == 1) s.checkpointing = true;
    if (change == 2) s.offload = true;
    steps.push_back(s);
  }
  for (std::int64_t swapped = std::max<std::int64_t>(configured.swapped, 1); swapped < units; ++swapped) {
    s.swapped = swapped;
    steps.push_back(s);
  }
  for (const MemorySettings& candidate : steps) {
    const MemoryEstimate e = estimate_memory(run, candidate, layout);
    if (!fits(e, layout)) continue;
    out += fmt::format("--fit {}: fits with {} ({}; {:.1f} GiB reserved for the CUDA context):\n", budget,
                       settings_text(candidate), line(candidate), gib(kDeviceReserve));
    out += fmt::format("  model:\n    base_dtype: {}\n    gradient_checkpointing: {}\n    activation_offload: {}\n",
                       candidate.fp8 ? "float8_e4m3fn" : "dtype", candidate.checkpointing, candidate.offload);
    out += candidate.swapped > 0
               ? fmt::format("  block_swap:\n    blocks: {}\n    ring: {}\n", candidate.swapped, candidate.ring)
               : std::string("  block_swap:\n    blocks: 0\n");
    return out;
  }
  out += fmt::format("--fit {}: does not fit even with every option ({} at {} of {} blocks swapped); use a smaller "
                     "bucket or batch\n",
                     budget, line(steps.back()), units - 1, units);
  return out;
}

}  // namespace wan
