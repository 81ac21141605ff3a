#pragma once
// The Wan block's normalisations and activation. Each op computes what the official model
// computes; on float32 CPU tensors it runs as one fused kernel forward and one backward (instead
// of the four to eight separate passes over [tokens, dim] the composite takes), with the same
// bits on every vector unit. Other devices and dtypes take the composite (namespace reference).

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
}  // namespace reference

}  // namespace wan
