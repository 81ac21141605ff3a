#pragma once
// Internal: copying a sample's tensor into its batch and checking it for NaN and Inf in the same
// pass over its bytes (each byte read once, while it is in the CPU's caches).

#include <ATen/core/Tensor.h>

namespace wanfw {

/// Copies `source` into `target` (same shape; `target` contiguous), converting its dtype, and
/// says whether every value that arrived is finite (integer dtypes always are). bf16, fp16, fp32
/// and fp64 copies, and bf16 -> fp32, run as one loop over the bytes; other pairs copy and check
/// a cache-sized chunk at a time.
bool copy_finite(at::Tensor& target, const at::Tensor& source);

/// Whether every value of `tensor` is finite: one read of its bytes, no temporaries.
bool all_finite(const at::Tensor& tensor);

/// How many values of `tensor` are NaN or infinite (for messages: the exact count).
std::int64_t count_nonfinite(const at::Tensor& tensor);

}  // namespace wanfw
