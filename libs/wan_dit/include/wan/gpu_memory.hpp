#pragma once
// `wanfw model-info`'s memory per GPU for a Wan DiT run: the training state as the strategy lays
// it out (whole on every GPU, or a 1/N share under fsdp), the parameters fsdp gathers at a time,
// and the activations of the largest bucket, per sample share and per block.

#include <string>

#include "wan/lora.hpp"
#include "wan/wan_config.hpp"
#include "wanfw/plugin.hpp"

namespace wan {

/// The lines for `models` DiTs of `config` with weights in `dtype` ("float32" or "bfloat16"),
/// adapters `settings` (or full fine-tuning), `gradient_checkpointing`, trained as `layout` says.
/// Activations are an estimate for attention that keeps no score matrix (SDPA's flash and
/// memory-efficient kernels on GPUs): per token, each checkpointed block keeps its input (dim
/// values) and one block recomputing holds about 24 dim + 2 ffn_dim values.
std::string gpu_memory(const WanConfig& config, const LoraSettings& settings, const std::string& dtype, int models,
                       bool gradient_checkpointing, const wanfw::TrainingLayout& layout);

}  // namespace wan
