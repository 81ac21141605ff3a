#pragma once
// `wanfw model-info`'s memory plan of a Wan DiT run, per GPU, for every strategy: the device and
// host bytes by part (wan/memory_estimate.hpp), the verdict against the GPU sizes people train on,
// and, for adapters on one device a rank, the same with each memory option changed alone and the
// cheapest settings that fit a device (model-info --fit). The formulas are in docs/low-memory.md.

#include <string>

#include "wan/memory_estimate.hpp"
#include "wanfw/options.hpp"
#include "wanfw/plugin.hpp"

namespace wan {

/// The memory options `settings` takes, as plans name them ("fp8 base, checkpointing, activation
/// offload, recompute in 2 chunks, 36 blocks swapped (ring 2)"), or "none".
std::string memory_settings_text(const MemorySettings& settings);

/// Logs "memory options: <memory_settings_text>" for the settings the options and `layout` take, when
/// they take any (a run's start-up line).
void log_memory_options(const wanfw::Options& options, const wanfw::TrainingLayout& layout);

/// The settings layout.block_swap_* and the options say, read into MemorySettings.
MemorySettings configured_memory(const wanfw::Options& options, const wanfw::TrainingLayout& layout);

/// What a sharded step sends a GPU (fsdp's formula, bench/fsdp_vs_ddp.py's): all-gathers forward and
/// backward, the gradients' reduce-scatter and, with replica groups (fsdp replicate), each shard's
/// all-reduce across them; beside plain sharding over every rank. Empty when the state is not sharded.
std::string shard_traffic(const PlannedRun& run, const wanfw::TrainingLayout& layout);

/// The plan of `run` as configured, laid out as `layout` says; with layout.fit_device_bytes
/// (model-info --fit, and --host-ram) the fewest changes that fit, as the YAML to set.
std::string memory_plan(const PlannedRun& run, const MemorySettings& configured, const wanfw::TrainingLayout& layout);

}  // namespace wan
