#pragma once
// The one estimate of the memory a Wan DiT training step needs, per rank: device and host bytes by
// part, for any run the Wan model plugins train (a DiT trained whole or through adapters, one or two
// experts, a distillation's other networks), any layout (whole on every GPU, or a share under a
// strategy that shards the state) and any memory options (fp8 base, block swap, checkpointing,
// activation offload, optimizer state on the host). model-info's plan (wan/memory_plan.hpp), `--fit` and the plugins' planned
// device bytes all read it. The formulas are in docs/low-memory.md.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wan/lora.hpp"
#include "wan/task.hpp"
#include "wan/wan_config.hpp"
#include "wanfw/plugin.hpp"

namespace wan {

/// Bytes in a GiB, the unit the plans print.
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// The memory options a plan varies.
struct MemorySettings {
  bool fp8 = false;            ///< model.base_dtype: float8_e4m3fn
  bool checkpointing = false;  ///< model.gradient_checkpointing
  bool offload = false;        ///< model.activation_offload
  std::int64_t swapped = 0;    ///< block_swap.blocks
  std::int64_t ring = 2;       ///< block_swap.ring
  std::int64_t chunks = 1;     ///< model.recompute_chunks (with checkpointing)
  bool host_state = false;     ///< optimizer.state: host
  bool operator==(const MemorySettings&) const = default;
};

/// A network a step holds on the device whatever the options (a distillation teacher, a critic
/// trained whole): what, its frozen bytes or the parameters it trains whole (whose state sits where
/// trained_parameter_bytes says), and whether it is part of the trained module, which a strategy
/// that shards the state splits over the GPUs (a separate teacher stays whole on every GPU).
struct HeldNetwork {
  std::string what;
  double bytes = 0;
  bool in_module = false;
  double trained = 0;  ///< parameters trained whole (their state in place of `bytes`)
};

/// The run a plan is for: the DiT, its adapters (none: it trains whole), its weights' dtype
/// ("float32" or "bfloat16"), the DiTs it holds (two experts: 2) and its task (ti2v embeds a
/// timestep per token); and, for a distillation, every other network its steps hold.
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
  std::vector<HeldNetwork> held{};
  /// The activations of a network held there that back-propagates (a critic trained whole); none: the DiTs'.
  std::optional<WanConfig> held_graph{};
};

/// What one trained parameter costs between steps, where, and the words for it: its weight and
/// gradient (bf16 with `master_weights`, precision.mode bf16_weights; else in the weight's
/// `value_bytes`), and the optimizer's state: AdamW's moments in the weight's dtype, or with
/// `master_weights` an fp32 master and moments, on the device; or with `host_state`
/// (optimizer.state host) an fp32 master, a float32 gradient slot and fp32 moments in host memory.
/// Under a strategy that shards the state with it on the host (`sharded_copy_bytes` > 0, fsdp), each
/// shard stays in the weight's dtype on the host with its gradient slot and moments, and the device
/// keeps its gradient and a copy of the shard in the gathers' dtype (`sharded_copy_bytes` a value).
struct TrainedBytes {
  double device = 0;
  double host = 0;
  std::string parts;
  double gradient = 0;  ///< of `device`: the gradient's bytes (the rest: the weight the device computes with)
  double total() const { return device + host; }
};
TrainedBytes trained_parameter_bytes(double value_bytes, bool master_weights, bool host_state = false,
                                     double sharded_copy_bytes = 0);

/// Bytes of a frozen DiT's weights: every parameter in `dtype`, or with `fp8` the blocks' Linear
/// weights in e4m3 with their float32 scales (block-64 along the input where it divides, one a
/// row otherwise).
double frozen_dit_bytes(const WanConfig& config, const std::string& dtype, bool fp8);

/// Bytes a DiT holds between steps, device and host together: trained whole, its weights with
/// gradients and AdamW moments; with adapters, its frozen weights in `dtype` and the adapters'
/// float32 training state.
double dit_state_bytes(const WanConfig& config, const LoraSettings& lora, const std::string& dtype);

/// Bytes a block run (or recomputed) for its backward holds, `tokens` on a rank, `value_bytes` a
/// value: 24 dim + 2 ffn_dim values a token; recomputed in `chunks` chunks of tokens (capped at the
/// tokens), the larger of the self-attention's backward over every token (11 dim) and a chunk's
/// share beside what the whole sequence keeps (8 dim + (24 dim + 2 ffn_dim) / chunks), 3 dim more
/// with the sequence `split` over ranks (the exchanged queries, keys and values).
/// bench/chunked_recompute.cpp measures both.
double recomputed_block_bytes(const WanConfig& config, double tokens, double value_bytes, std::int64_t chunks,
                              bool split);

struct MemoryEstimate {
  double device = 0;  ///< bytes the caching allocator holds at the peak (max_memory_reserved)
  double host = 0;    ///< host bytes while training (streamed weights, offloaded activations)
  double host_build = 0;  ///< host bytes while the model is built on the host (block swap)
  std::vector<std::pair<std::string, double>> device_parts, host_parts;
  std::string activations;  ///< what the activations are counted for ("latents 21x60x104: ...")
};

/// Bytes the caching allocator holds beyond the plan's tensors (cuBLAS and attention workspaces,
/// blocks split between sizes): measured on an H200 with TI2V-5B LoRA steps, 1.18 to 1.35 GiB over
/// the tensors for every option (docs/low-memory.md); part of the plan's device bytes.
constexpr double kAllocatorSlack = 1.2 * 1024 * 1024 * 1024;

/// Bytes a CUDA context takes outside the caching allocator, counted when a plan is checked
/// against a device's size.
constexpr double kDeviceReserve = 0.5 * 1024 * 1024 * 1024;

/// The estimate for `run` with `settings`, laid out as `layout` says (strategy and GPUs, batch,
/// largest bucket, sequence parallelism, compute dtype, master weights).
MemoryEstimate estimate_memory(const PlannedRun& run, const MemorySettings& settings,
                               const wanfw::TrainingLayout& layout);

/// The one "fits" rule: a plan fits a device when its device bytes and the CUDA context's
/// (kDeviceReserve) are within the device's size, and, with `host_bytes` > 0, its host bytes (while
/// building too) within those.
bool fits(const MemoryEstimate& estimate, double device_bytes, double host_bytes = 0);

/// Against the GPU sizes people train on: "does not fit a 12 GB GPU; fits a 16 GB GPU (0.3 GiB
/// left); ...; fits an 80 GB GPU (52.9 GiB left)".
std::string device_fit(const MemoryEstimate& estimate);

}  // namespace wan
