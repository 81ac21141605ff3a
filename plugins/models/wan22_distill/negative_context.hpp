#pragma once
// The distillation's negative prompt: a text embedding read from model.negative_context.

#include <torch/types.h>

#include "wan/wan_config.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// The negative prompt's embedding [L, text_dim] (float32) from the file model.negative_context
/// names, checked through the tensor gate and against the teacher's text_dim and text_len;
/// undefined when the option is empty. Failures are ConfigErrors at the option.
torch::Tensor negative_context(const wanfw::Options& o, const wan::WanConfig& teacher);

/// The unconditional context of guidance for a batch of `context` [B, L, D]: `negative` [L', D]
/// repeated over the batch on the context's device and dtype, or zeros like the context.
torch::Tensor batch_negative(const torch::Tensor& negative, const torch::Tensor& context);

}  // namespace wan_distill
