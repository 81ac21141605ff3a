#pragma once
// The Wan block's elementwise chains as CUDA kernels (norm_kernels_cuda.cu,
// residual_rope_kernels_cuda.cu): q/k RMSNorm, the modulated LayerNorm, the gated residual and
// RoPE, forward and backward. Each reads its inputs in their own dtype (float32 or bfloat16),
// computes in float32 and writes its output's dtype. Plain pointers and sizes, so that the .cu
// files need no LibTorch headers; block_ops_cuda.cpp wraps them as autograd functions. Every launcher returns the CUDA error code of its launch (0: none).

#include <cstdint>

namespace wan::kernels::cuda {

enum class Dtype : int { Float32 = 0, BFloat16 = 1 };

/// Rows of `dim`: y = round_x(x * rstd) * weight, rstd = 1 / sqrt(mean(x^2) + eps) saved per row.
int rms_norm_forward(Dtype xt, const void* x, Dtype wt, const void* weight, Dtype yt, void* y, float* rstd,
                     std::int64_t rows, std::int64_t dim, float eps, void* stream);
/// dx (x's dtype) and, when `weight_grad` is set, the weight's gradient (float32, summed over rows
/// in a fixed order through `partials` [ceil(rows / 256), dim] float32).
int rms_norm_backward(Dtype gt, const void* g, Dtype xt, const void* x, Dtype wt, const void* weight,
                      const float* rstd, void* dx, float* weight_grad, float* partials, std::int64_t rows,
                      std::int64_t dim, void* stream);

/// x [samples, tokens, dim]: y = ((x - mean) * rstd) * (1 + scale) + shift, scale and shift float32
/// [samples, 1, dim] (per_token false) or [samples, tokens, dim]; mean and rstd saved per row.
int modulated_layer_norm_forward(Dtype xt, const void* x, const float* scale, const float* shift, void* y,
                                 float* mean, float* rstd, std::int64_t samples, std::int64_t tokens,
                                 std::int64_t dim, bool per_token, float eps, void* stream);
/// dx (x's dtype), dscale and dshift (float32, shaped as scale; per sample they are summed over the
/// sample's tokens in a fixed order through `partials` [2, samples, ceil(tokens / 256), dim]).
int modulated_layer_norm_backward(Dtype gt, const void* g, Dtype xt, const void* x, const float* scale,
                                  const float* mean, const float* rstd, void* dx, float* scale_grad, float* shift_grad,
                                  float* partials, std::int64_t samples, std::int64_t tokens, std::int64_t dim,
                                  bool per_token, void* stream);

/// out = round_out(float(x) + float(y) * gate), x and y [samples, tokens, dim], gate float32
/// [samples, 1, dim] or [samples, tokens, dim].
int gated_residual_forward(Dtype xt, const void* x, Dtype yt, const void* y, const float* gate, Dtype ot, void* out,
                           std::int64_t samples, std::int64_t tokens, std::int64_t dim, bool per_token, void* stream);
/// dx = g (x's dtype), dy = g * gate (y's dtype), dgate = g * y (float32; per sample summed over
/// tokens through `partials` [samples, ceil(tokens / 256), dim]).
int gated_residual_backward(Dtype gt, const void* g, Dtype yt, const void* y, const float* gate, Dtype xt, void* dx,
                            void* dy, float* gate_grad, float* partials, std::int64_t samples, std::int64_t tokens,
                            std::int64_t dim, bool per_token, void* stream);

/// x [batch, tokens, heads, 2 * pairs]: each channel pair (a, b) of token l times the rotation
/// rotations[l, j] = (c, s) (interleaved float32), as the complex product (a + ib)(c + is);
/// `conjugate` rotates back (the backward pass).
int rope(Dtype xt, const void* x, const float* rotations, Dtype ot, void* out, std::int64_t batch, std::int64_t tokens,
         std::int64_t heads, std::int64_t pairs, bool conjugate, void* stream);

}  // namespace wan::kernels::cuda
