#pragma once
// The memory plan of a Wan DiT LoRA run, per rank: device and host bytes for the frozen base (in
// its dtype or fp8), the streamed blocks (block swap), the adapters with their gradients and AdamW
// moments, and the activations (checkpointed, or with their inputs offloaded to the host); with
// and without each option, and the cheapest settings that fit a device (model-info --fit). The
// formulas are in docs/low-memory.md.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wan/lora.hpp"
#include "wan/task.hpp"
#include "wan/wan_config.hpp"
#include "wanfw/plugin.hpp"

namespace wan {

/// The memory options a plan varies.
struct MemorySettings {
  bool fp8 = false;            ///< model.base_dtype: float8_e4m3fn
  bool checkpointing = false;  ///< model.gradient_checkpointing
  bool offload = false;        ///< model.activation_offload
  std::int64_t swapped = 0;    ///< block_swap.blocks
  std::int64_t ring = 2;       ///< block_swap.ring
  bool operator==(const MemorySettings&) const = default;
};

/// The run a plan is for: the DiT, its adapters, its weights' dtype ("float32" or "bfloat16"), the
/// DiTs it holds (two experts: 2) and its task (ti2v embeds a timestep per token); and, for a
/// distillation, every other network its steps hold.
struct PlannedRun {
  WanConfig config;
  LoraSettings lora;
  std::string dtype = "float32";
  int models = 1;
  Task task = Task::T2V;
  /// Adapter parameters trained on the same base beside `lora`'s (a DMD critic sharing the base).
  std::int64_t more_adapters = 0;
  /// A DiT of its own whose blocks are units after the first's, with adapters on a frozen base in
  /// `dtype` (a DMD critic: the teacher's architecture), and its adapter parameters. A step's graph
  /// is the larger network's.
  std::optional<WanConfig> critic{};
  std::int64_t critic_adapters = 0;
  /// Networks a step holds on the device whatever the options (a distillation teacher, a critic
  /// that trains every weight): what, and bytes.
  std::vector<std::pair<std::string, double>> held{};
  /// The activations of a network held there that back-propagates (a critic trained whole); none: the DiTs'.
  std::optional<WanConfig> held_graph{};
};

/// Bytes of a frozen DiT's weights: every parameter in `dtype`, or with `fp8` the blocks' Linear
/// weights in e4m3 with their float32 scales (block-64 along the input where it divides, one a
/// row otherwise).
double frozen_dit_bytes(const WanConfig& config, const std::string& dtype, bool fp8);

struct MemoryEstimate {
  double device = 0;  ///< bytes the caching allocator holds at the peak (max_memory_reserved)
  double host = 0;    ///< host bytes while training (streamed weights, offloaded activations)
  double host_build = 0;  ///< host bytes while the model is built on the host (block swap)
  std::vector<std::pair<std::string, double>> device_parts, host_parts;
};

/// Bytes the caching allocator holds beyond the plan's tensors (cuBLAS and attention workspaces,
/// blocks split between sizes): measured on an H200 with TI2V-5B LoRA steps, 1.18 to 1.35 GiB over
/// the tensors for every option (docs/low-memory.md); part of the plan's device bytes.
constexpr double kAllocatorSlack = 1.2 * 1024 * 1024 * 1024;

/// Bytes a CUDA context takes outside the caching allocator, counted when a plan is checked
/// against a device's size.
constexpr double kDeviceReserve = 0.5 * 1024 * 1024 * 1024;

/// The estimate for `run` with `settings`, laid out as `layout` says (batch, largest bucket,
/// sequence parallelism, compute dtype).
MemoryEstimate estimate_memory(const PlannedRun& run, const MemorySettings& settings,
                               const wanfw::TrainingLayout& layout);

/// The settings layout.block_swap_* and the options say, read into MemorySettings.
MemorySettings configured_memory(const wanfw::Options& options, const wanfw::TrainingLayout& layout);

/// model-info's memory plan: the configured run's device and host bytes by part, the same with
/// each option changed alone, and with layout.fit_device_bytes (model-info --fit, and --host-ram)
/// the fewest changes that fit, as the YAML to set. "" for a strategy that shards (fsdp).
std::string memory_plan(const PlannedRun& run, const MemorySettings& configured, const wanfw::TrainingLayout& layout);

}  // namespace wan
