#pragma once
// `wanfw model-info`'s memory per GPU for a Wan DiT run: the training state as the strategy lays
// it out (whole on every GPU, or a 1/N share under fsdp), the parameters fsdp gathers at a time,
// and the activations of the largest bucket, per sample share and per block.

#include <string>

#include "wan/lora.hpp"
#include "wan/wan_config.hpp"
#include "wanfw/plugin.hpp"

namespace wan {

/// Bytes in a GiB, the unit the memory plans print.
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// The activations one training forward and backward of a DiT of `config` holds per GPU on the
/// largest bucket (`layout.latent`), and the text gpu_memory prints for them (" + activations
/// 9.89 GiB (...)"); 0 bytes when the layout names no bucket.
struct ActivationEstimate {
  double bytes = 0;
  std::string text;
};
ActivationEstimate estimate_activations(const WanConfig& config, bool gradient_checkpointing,
                                        const wanfw::TrainingLayout& layout);

/// Whether `bytes` fit a 24 GB and an 80 GB GPU: "fits a 24 GB GPU (0.8 GiB left); fits an 80 GB
/// GPU (52.9 GiB left)".
std::string gpu_fit(double bytes);

/// The lines for `models` DiTs of `config` with weights in `dtype` ("float32" or "bfloat16"),
/// adapters `settings` (or full fine-tuning), `gradient_checkpointing`, trained as `layout` says.
/// Activations are an estimate for attention that keeps no score matrix (SDPA's flash and
/// memory-efficient kernels on GPUs): per token, each checkpointed block keeps its input (dim
/// values) and one block recomputing holds about 24 dim + 2 ffn_dim values.
std::string gpu_memory(const WanConfig& config, const LoraSettings& settings, const std::string& dtype, int models,
                       bool gradient_checkpointing, const wanfw::TrainingLayout& layout);

}  // namespace wan
