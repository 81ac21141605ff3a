#pragma once
// The Wan block's normalisations, activation, gated residual and RoPE. Each op computes what the
// official model computes; on float32 CPU tensors the norms and the activation run as one fused
// kernel forward and one backward (instead of the four to eight separate passes over [tokens, dim]
// the composite takes), with the same bits on every vector unit. On a GPU, where the project is
// built with the CUDA toolkit, RMSNorm, the modulated LayerNorm, the gated residual and RoPE run as
// fused CUDA kernels for float32 and bfloat16 (each checked against the composite on its device
// before its first use). Everything else takes the composite (namespace reference).

#include <vector>

#include <torch/types.h>

namespace wan {

/// RMSNorm over the last dim: (x * rsqrt(mean(x^2) + eps)) in float32, cast to x's dtype, times
/// `weight` [dim].
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

/// GELU with the tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
torch::Tensor gelu_tanh(const torch::Tensor& x);

/// layer_norm(x) * (1 + scale) + shift in float32 (layer norm without affine weights), cast to
/// x's dtype. `x` [B, L, dim]; `scale` and `shift` [B, 1, dim] (one modulation per sample) or
/// [B, L, dim] (one per token).
torch::Tensor modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& shift,
                                   double eps);

/// (x in float32 + y * gate) cast to x's dtype: a block's residual update. `x` and `y` [B, L, dim];
/// `gate` float32 [B, 1, dim] or [B, L, dim].
torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate);

/// RoPE: each consecutive channel pair of `x` [B, L, H, D] as a complex number times
/// `rotations[l]` (complex64 [L, D/2]), in float32, cast back to x's dtype.
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& rotations);

/// Which implementation the ops above take for tensors like `x`.
enum class BlockOpsPath { FusedCpu, FusedCuda, Composite };
BlockOpsPath block_ops_path(const torch::Tensor& x);
/// Whether this build carries the fused CUDA kernels.
bool built_with_cuda_kernels();
/// Whether the fused CUDA kernel `op` ("rms_norm", "modulated_layer_norm", "gated_residual",
/// "rope") serves tensors like `x`: built, a CUDA float32 or bfloat16 tensor, and the kernel
/// checked against the reference on x's device (the first call runs that check).
bool cuda_kernel_serves(const char* op, const torch::Tensor& x);

/// The `count` modulation chunks (shift, scale, gate, ...) of `table + e` in float32: `table`
/// [1, count, dim] with `e` [B, count, dim] gives [B, 1, dim] each; `e` [B, L, count, dim] (one
/// timestep per token) gives [B, L, dim].
std::vector<torch::Tensor> modulation_chunks(const torch::Tensor& table, const torch::Tensor& e, int count);

/// Whether the ops above run fused for tensors like `x` (float32 on the CPU).
bool fused_block_ops(const torch::Tensor& x);

/// The same ops as chains of LibTorch operators, as the official model writes them: what the
/// fused kernels are tested against, and what runs where they do not.
namespace reference {
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor gelu_tanh(const torch::Tensor& x);
torch::Tensor modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& shift,
                                   double eps);
torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate);
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& rotations);
}  // namespace reference

}  // namespace wan
