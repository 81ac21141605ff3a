#include "wan/memory_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "wanfw/log.hpp"

namespace wan {

namespace {

double gib(double bytes) { return bytes / kGiB; }

/// The chunk counts --fit tries for a recomputed block, after every other option.
constexpr std::int64_t kFitChunks[] = {2, 4, 8, 16};

std::string totals(const MemoryEstimate& e) {
  std::string text = fmt::format("device {:.2f} GiB, host {:.2f} GiB", gib(e.device), gib(e.host));
  if (e.host_build > e.host) text += fmt::format(" ({:.2f} GiB while building)", gib(e.host_build));
  return text;
}

/// Each memory option changed alone, for adapters on one device a rank (what the options serve).
std::string variants(const PlannedRun& run, const MemorySettings& configured, const wanfw::TrainingLayout& layout,
                     std::int64_t units) {
  std::vector<std::pair<std::string, MemorySettings>> changed;
  MemorySettings v = configured;
  v.fp8 = !configured.fp8;
  changed.emplace_back(configured.fp8 ? "base in dtype" : "fp8 base", v);
  v = configured;
  v.checkpointing = true;
  v.offload = !(configured.checkpointing && configured.offload);
  changed.emplace_back(v.offload ? "activation offload" : "no activation offload", v);
  v = configured;
  v.checkpointing = true;
  v.chunks = configured.chunks > 1 ? 1 : 8;
  changed.emplace_back(v.chunks > 1 ? "recompute in 8 chunks" : "whole blocks recomputed", v);
  v = configured;
  v.checkpointing = true;
  v.swapped = configured.swapped > 0 ? 0 : units / 2;
  changed.emplace_back(v.swapped > 0 ? fmt::format("{} blocks swapped", v.swapped) : "no block swap", v);
  v = configured;
  v.host_state = !configured.host_state;
  changed.emplace_back(v.host_state ? "the optimizer's state on the host" : "the optimizer's state on the device", v);
  std::string out;
  for (const auto& [name, settings] : changed)
    out += fmt::format("  with {}: {}\n", name, totals(estimate_memory(run, settings, layout)));
  return out;
}

/// The YAML that sets `s`: the model's options, the optimizer's state and block swap (`adapters`:
/// the options that serve a frozen base only, fp8 and block swap, too).
std::string settings_yaml(const MemorySettings& s, bool adapters) {
  std::string out = "  model:\n";
  if (adapters) out += fmt::format("    base_dtype: {}\n", s.fp8 ? "float8_e4m3fn" : "dtype");
  out += fmt::format("    gradient_checkpointing: {}\n", s.checkpointing);
  out += fmt::format("    activation_offload: {}\n", s.offload);
  if (s.chunks > 1) out += fmt::format("    recompute_chunks: {}\n", s.chunks);
  out += fmt::format("  optimizer:\n    state: {}\n", s.host_state ? "host" : "device");
  if (adapters || s.swapped > 0)
    out += s.swapped > 0 ? fmt::format("  block_swap:\n    blocks: {}\n    ring: {}\n", s.swapped, s.ring)
                         : std::string("  block_swap:\n    blocks: 0\n");
  return out;
}

/// The fewest changes that fit, cheapest first. Adapters on one device a rank: fp8, checkpointing,
/// offload, the optimizer's state on the host (copies of the trained parameters, no compute), the
/// fewest swapped blocks, then the fewest chunks of a recomputed block. A DiT trained whole:
/// checkpointing, offload, the state on the host (each rank its shards under a strategy that shards it),
/// with it the fewest swapped blocks (their trained weights streamed, where nothing reduces a unit's
/// gradients after backward), then chunks.
std::string fit(const PlannedRun& run, const MemorySettings& configured, const wanfw::TrainingLayout& layout,
                std::int64_t units, bool options_apply) {
  const std::string budget =
      fmt::format("{:.2f} GiB of device memory{}", gib(layout.fit_device_bytes),
                  layout.fit_host_bytes > 0 ? fmt::format(" and {:.2f} GiB of host memory", gib(layout.fit_host_bytes))
                                            : std::string());
  const bool whole = !run.lora.enabled();
  if (!options_apply && !whole) {
    const bool fit = fits(estimate_memory(run, configured, layout), layout.fit_device_bytes, layout.fit_host_bytes);
    return fmt::format(
        "--fit {}: {} as configured (the fp8 base, block swap and activation offload serve adapters on "
        "one device a rank; else shard the state over more GPUs)\n",
        budget, fit ? "fits" : "does not fit");
  }
  MemorySettings s = configured;
  std::vector<MemorySettings> steps{s};
  for (const auto change : {0, 1, 2}) {
    if (change == 0 && options_apply) s.fp8 = true;
    if (change == 1) s.checkpointing = true;
    if (change == 2) s.offload = true;
    if (!(s == steps.back())) steps.push_back(s);
  }
  // The optimizer's state on the host first, then as configured (a host short of memory for it).
  std::vector<bool> homes{configured.host_state};
  if (!configured.host_state) homes.insert(homes.begin(), true);
  // A DiT trained whole streams blocks only with its state on the host (block swap then streams the
  // trained weights), where nothing reduces a unit's gradients after backward.
  const bool whole_swaps = whole && layout.unit_gradients_final && !layout.sharded;
  const auto most_swapped = [&](bool home) {
    return options_apply || (whole_swaps && home) ? units - 1 : configured.swapped;
  };
  for (const bool home : homes) {
    s.host_state = home;
    for (std::int64_t swapped = configured.swapped; swapped <= most_swapped(home); ++swapped) {
      s.swapped = swapped;
      if (!(s == steps.back())) steps.push_back(s);
    }
  }
  // Then the recomputed block in chunks of tokens (a second pass over three projections a block),
  // the fewest chunks first, each with the fewest swapped blocks.
  for (const std::int64_t chunks : kFitChunks) {
    if (chunks <= configured.chunks) continue;
    s.chunks = chunks;
    for (const bool home : homes) {
      s.host_state = home;
      for (std::int64_t swapped = configured.swapped; swapped <= most_swapped(home); ++swapped) {
        s.swapped = swapped;
        steps.push_back(s);
      }
    }
  }
  const auto fitting = [&](const MemorySettings& settings) {
    return fits(estimate_memory(run, settings, layout), layout.fit_device_bytes, layout.fit_host_bytes);
  };
  for (MemorySettings candidate : steps) {
    if (!fitting(candidate)) continue;
    // The options taken on the way that this one does without: activation offload, the state on
    // the host, the fp8 base, then checkpointing (when nothing else needs it), each off if it still
    // fits.
    for (const auto option : {0, 1, 2, 3}) {
      MemorySettings fewer = candidate;
      if (option == 0) fewer.offload = configured.offload;
      if (option == 1 && (!whole || fewer.swapped == 0)) fewer.host_state = configured.host_state;
      if (option == 2) fewer.fp8 = configured.fp8;
      if (option == 3 && !fewer.offload && fewer.chunks == 1 && fewer.swapped == 0)
        fewer.checkpointing = configured.checkpointing;
      if (!(fewer == candidate) && fitting(fewer)) candidate = fewer;
    }
    const MemoryEstimate e = estimate_memory(run, candidate, layout);
    return fmt::format("--fit {}: fits with {} ({}; {:.1f} GiB reserved for the CUDA context):\n{}", budget,
                       memory_settings_text(candidate), totals(e), gib(kDeviceReserve),
                       settings_yaml(candidate, options_apply));
  }
  // Of all the candidates, the one that holds the fewest device bytes.
  MemorySettings least = steps.front();
  MemoryEstimate fewest = estimate_memory(run, least, layout);
  for (const MemorySettings& candidate : steps)
    if (MemoryEstimate e = estimate_memory(run, candidate, layout); e.device < fewest.device) {
      least = candidate;
      fewest = std::move(e);
    }
  return fmt::format(
      "--fit {}: does not fit even with every option (at the least device memory, {}: {}); use a "
      "smaller bucket or batch{}\n",
      budget, memory_settings_text(least), totals(fewest), options_apply ? "" : ", or shard the state over more GPUs");
}

}  // namespace

bool fits(const MemoryEstimate& e, double device_bytes, double host_bytes) {
  return e.device + kDeviceReserve <= device_bytes && (host_bytes <= 0 || std::max(e.host, e.host_build) <= host_bytes);
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

std::string memory_settings_text(const MemorySettings& s) {
  std::vector<std::string> parts;
  if (s.fp8) parts.push_back("fp8 base");
  if (s.checkpointing) parts.push_back("checkpointing");
  if (s.offload) parts.push_back("activation offload");
  if (s.checkpointing && s.chunks > 1) parts.push_back(fmt::format("recompute in {} chunks", s.chunks));
  if (s.swapped > 0) parts.push_back(fmt::format("{} blocks swapped (ring {})", s.swapped, s.ring));
  if (s.host_state) parts.push_back("the optimizer's state on the host");
  if (parts.empty()) return "none";
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

void log_memory_options(const wanfw::Options& options, const wanfw::TrainingLayout& layout) {
  const std::string text = memory_settings_text(configured_memory(options, layout));
  if (text != "none") wanfw::log::info("memory options: ", text);
}

MemorySettings configured_memory(const wanfw::Options& o, const wanfw::TrainingLayout& layout) {
  MemorySettings s;
  s.fp8 = o.string("base_dtype") == "float8_e4m3fn";
  s.checkpointing = o.boolean("gradient_checkpointing");
  s.offload = o.boolean("activation_offload");
  s.chunks = o.integer("recompute_chunks");
  s.swapped = layout.swapped_blocks;
  s.ring = layout.swap_ring;
  s.host_state = layout.host_optimizer_state;
  return s;
}

std::string memory_plan(const PlannedRun& run, const MemorySettings& configured, const wanfw::TrainingLayout& layout) {
  const MemoryEstimate now = estimate_memory(run, configured, layout);
  std::string out = fmt::format(
      "memory plan per GPU, {} on {} GPU{}{} ({}):\n", layout.strategy, layout.gpus, layout.gpus == 1 ? "" : "s",
      (layout.sequence_parallel > 1 ? fmt::format(", sequence parallel {}", layout.sequence_parallel) : std::string()) +
          (layout.replica_groups > 1
               ? fmt::format(", {} replica groups of {}", layout.replica_groups, layout.gpus / layout.replica_groups)
               : std::string()),
      memory_settings_text(configured));
  out += now.activations.empty() ? "  activations: none counted (data.buckets names no size to count them for)\n"
                                 : fmt::format("  activations for {}\n", now.activations);
  for (const auto& [what, bytes] : now.device_parts)
    if (bytes > 0) out += fmt::format("  device: {} {:.2f} GiB\n", what, gib(bytes));
  for (const auto& [what, bytes] : now.host_parts) out += fmt::format("  host: {} {:.2f} GiB\n", what, gib(bytes));
  out += fmt::format("  total: {}; with {:.1f} GiB for the CUDA context: {}\n", totals(now), gib(kDeviceReserve),
                     device_fit(now));
  out += shard_traffic(run, layout);
  const bool adapters = run.lora.enabled();
  if (!adapters) {
    const TrainedBytes per =
        trained_parameter_bytes(bytes_per_value(run.dtype), layout.master_weights, configured.host_state,
                                layout.sharded ? (layout.dtype == at::kFloat ? bytes_per_value(run.dtype) : 2) : 0);
    out += fmt::format("  training state per trained parameter: {:g} bytes ({})\n", per.total(), per.parts);
  }
  // The memory options serve adapters on a frozen base, one device a rank.
  const bool options_apply = adapters && !layout.sharded;
  const std::int64_t blocks = run.config.num_layers + std::ssize(run.config.vace_layers);  // VACE blocks are units
  const std::int64_t units = blocks * run.models + (run.critic ? run.critic->num_layers : 0);
  if (options_apply)
    out += variants(run, configured, layout, units);
  else if (layout.replica_groups == 1 || configured.host_state) {  // whole, adapters on several GPUs, or sharded
    MemorySettings moved = configured;
    moved.host_state = !configured.host_state;
    out += fmt::format("  with {}: {}\n",
                       moved.host_state ? "the optimizer's state on the host" : "the optimizer's state on the device",
                       totals(estimate_memory(run, moved, layout)));
  }
  if (layout.fit_device_bytes > 0) out += fit(run, configured, layout, units, options_apply);
  return out;
}

}  // namespace wan
