#pragma once
// Which of ATen's scaled-dot-product attention kernels the Wan DiT runs (model.attention), and
// the line that says which one ran.
//
//   auto       ATen's own choice per call, from every kernel it has (its priority order; on a GPU
//              flash or cuDNN for bf16/fp16, memory-efficient where they do not apply, math last)
//   flash | efficient | cudnn | math
//              only that kernel: a call it cannot run (a dtype, head size or device it does not
//              take) stops the run with an error naming the backend, never a silent fallback
//
// The choice is process-wide (ATen keeps it in its global context), as it is in PyTorch.

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wan {

enum class AttentionBackend { Auto, Flash, Efficient, CuDNN, Math };

/// The option's choices, in the order the docs list them.
const std::vector<std::string>& attention_backend_names();
AttentionBackend parse_attention_backend(const std::string& name);

/// Makes `backend` the only kernel ATen may run (Auto: every kernel, ATen's defaults).
void use_attention_backend(AttentionBackend backend);

/// Before an attention call on q, k, v [B, H, L, D] (and mask): the first call of each kind
/// (device, dtype, head size, with or without a mask) asks ATen which kernel it will run and logs
/// "attention: SDPA runs flash (cpu, float32, head dim 64)"; it throws wanfw::Error when no enabled
/// kernel can run it (a forced backend that does not apply). Later calls of a kind cost a lookup.
void check_attention_kernel(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                   const at::Tensor& mask);

}  // namespace wan
