#pragma once
// Row kernels of the Wan block's normalisations and activation on float32 CPU memory. Each
// function works on rows [begin, end) of a contiguous [rows, dim] array; callers split the rows
// across threads. The arithmetic is written lane by lane (16 lanes, fixed summation order) and
// compiled without contraction into FMA, so every vector unit (plain x86-64, AVX2, AVX-512)
// computes the same bits.

#include <cstdint>

namespace wan::kernels {

/// Lanes of every row reduction: partial sums i, i+16, i+32, ... added in this order, then the
/// 16 partial sums pairwise.
inline constexpr std::int64_t kLanes = 16;

/// y = (x * rstd) * weight with rstd = 1 / sqrt(mean(x^2) + eps); keeps rstd per row.
void rms_norm_rows(const float* x, const float* weight, float* y, float* rstd, std::int64_t begin, std::int64_t end,
                   std::int64_t dim, float eps);

/// dx = rstd * (g*w - n * mean(g*w * n)) with n = x * rstd; adds g * n of the rows into
/// `weight_grad_partial` [dim] (zeroed by the caller).
void rms_norm_backward_rows(const float* g, const float* x, const float* weight, const float* rstd, float* dx,
                            float* weight_grad_partial, std::int64_t begin, std::int64_t end, std::int64_t dim);

/// GELU with the tanh approximation, as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
/// (0.5 (1 + tanh u) = sigmoid(2u)), over n elements.
void gelu_tanh(const float* x, float* y, std::int64_t n);

/// dx = g * d/dx gelu_tanh(x), over n elements.
void gelu_tanh_backward(const float* g, const float* x, float* dx, std::int64_t n);

/// y = layer_norm(x) * (1 + scale) + shift over each row (no affine weights), where row r takes
/// scale and shift row `r / rows_per_modulation`; keeps mean and rstd per row.
void modulated_layer_norm_rows(const float* x, const float* scale, const float* shift, float* y, float* mean,
                               float* rstd, std::int64_t begin, std::int64_t end, std::int64_t dim,
                               std::int64_t rows_per_modulation, float eps);

/// dx of modulated_layer_norm_rows; adds g * x_hat into `scale_grad` and g into `shift_grad`
/// (both [dim], the one modulation row these rows share; zeroed by the caller).
void modulated_layer_norm_backward_rows(const float* g, const float* x, const float* scale, const float* mean,
                                        const float* rstd, float* dx, float* scale_grad, float* shift_grad,
                                        std::int64_t begin, std::int64_t end, std::int64_t dim,
                                        std::int64_t rows_per_modulation);

}  // namespace wan::kernels
