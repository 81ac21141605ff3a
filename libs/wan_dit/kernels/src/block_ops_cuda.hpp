#pragma once
// Internal: the block ops' fused CUDA path (the kernels of block_kernels_cuda.hpp as
// autograd functions), built when the CUDA toolkit is present (WANFW_CUDA_KERNELS). Before a
// kernel serves a dtype on a device for the first time, it is checked against the composite
// reference (forward and every input's gradient, on small inputs of odd sizes); one that
// disagrees, or cannot run on that GPU, is logged and left unused, so the block then computes
// through the reference.

#include <torch/types.h>

namespace wan::cuda_ops {

/// Whether the fused CUDA kernel `op` ("rms_norm", "modulated_layer_norm", "gated_residual",
/// "rope") serves tensors like `x` (a CUDA float32 or bfloat16 tensor, the kernel checked on its
/// device for its dtype).
bool serves(const char* op, const torch::Tensor& x);

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& shift,
                                   double eps);
torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate);
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& rotations);

}  // namespace wan::cuda_ops
