#pragma once
// The options that choose where a Wan DiT's memory goes, for every model plugin that builds one:
// the frozen base's storage (fp8), the checkpointed activations' place (host memory) and the
// recomputed blocks' chunks of tokens.

#include <array>
#include <cstdint>
#include <string>

#include "wanfw/options.hpp"
#include "wanfw/plugin.hpp"

namespace wan {

/// `<prefix>base_dtype`: "dtype" (the frozen base in the weights' dtype) or "float8_e4m3fn" (the
/// blocks' Linear weights in fp8 with scales, WanPlacement::fp8_base); `frozen` says in the docs
/// what stays frozen on it.
wanfw::OptionSpec base_dtype_option(const std::string& prefix, const std::string& frozen);

/// Whether that option asks for an fp8 base; an error pointing at it when a weight of the base
/// trains (no adapters: `trains_base`).
bool fp8_base_from(const wanfw::Options& options, const std::string& prefix, bool trains_base);

/// `activation_offload`: with gradient checkpointing, each block's saved input in host memory.
wanfw::OptionSpec activation_offload_option();

/// Whether that option is on; an error pointing at it when gradient_checkpointing is off (without
/// checkpointing every activation stays, and offloading one input per block saves nothing).
bool activation_offload_from(const wanfw::Options& options);

/// `recompute_chunks`: with gradient checkpointing, each block run and recomputed in chunks of tokens.
wanfw::OptionSpec recompute_chunks_option();

/// That option's count (1: whole blocks); an error pointing at it below 1, or above 1 without
/// gradient_checkpointing.
std::int64_t recompute_chunks_from(const wanfw::Options& options);

/// A warning naming recompute_chunks when it asks for more chunks than a rank holds tokens of the
/// largest bucket `layout` names (latent frames x height x width in `patch`es, split over the
/// sequence-parallel group): a chunk holds one token at least, so the count is clamped there.
void warn_chunks_beyond_tokens(const wanfw::Options& options, const wanfw::TrainingLayout& layout,
                               const std::array<std::int64_t, 3>& patch);

/// An error pointing at gradient_checkpointing when `layout` streams blocks (block_swap.blocks)
/// and the option is off: a block that keeps its weights for backward would find another block's
/// in its device slot. Checked with the config, not at the first backward.
void check_block_swap_needs(const wanfw::Options& options, const wanfw::TrainingLayout& layout);

}  // namespace wan
