#include "block_kernels_cpu.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

// One copy of each kernel per vector unit, chosen when the library loads; the build compiles this
// file with -ffp-contract=off, so the copies differ in speed only.
#define WAN_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace wan::kernels {

namespace {

/// Sum over i < dim of term(i), lane by lane (see kLanes), then the lanes pairwise.
template <class Term>
[[gnu::always_inline]] inline float lane_sum(std::int64_t dim, Term&& term) {
  float acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= dim; i += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) acc[l] += term(i + l);
  for (std::int64_t l = 0; i + l < dim; ++l) acc[l] += term(i + l);
  for (std::int64_t width = kLanes / 2; width > 0; width /= 2)
    for (std::int64_t l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0];
}

/// e^x for float32 to about 1 ulp, for x <= 0: x = n ln2 + r, |r| <= ln2 / 2, e^r by a
/// degree-7 polynomial (Cephes' expf coefficients), times 2^n; 0 below -87 (where 2^n would leave
/// the normal range). Branch-free, so the loops around it vectorise.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  const float clamped = std::max(x, -87.0f);
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = clamped * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  const std::int32_t exponent = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(shifter);
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float value = p * std::bit_cast<float>((exponent + 127) << 23);
  return x < -87.0f ? 0.0f : value;
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

/// The GELU gate s = sigmoid(2u) = 0.5 (1 + tanh u) of the argument u(x), and s (1 - s): with
/// e = exp(-2|u|) <= 1, a = 1 / (1 + e) and b = e a are s and 1 - s (or 1 - s and s for u < 0),
/// each without cancellation, and s (1 - s) = a b.
struct GeluGate {
  float s, s_one_minus_s;
};

[[gnu::always_inline]] inline GeluGate gelu_gate(float x) {
  const float u = kGeluScale * (x + kGeluCubic * (x * x * x));
  const float e = exp_nonpositive(-2.0f * std::abs(u));
  const float a = 1.0f / (1.0f + e);
  const float b = e * a;
  return {u >= 0.0f ? a : b, a * b};
}

}  // namespace

WAN_VECTOR_CLONES
void rms_norm_rows(const float* x, const float* weight, float* y, float* rstd, std::int64_t begin, std::int64_t end,
                   std::int64_t dim, float eps) {
  for (std::int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const float mean_square = lane_sum(dim, [&](std::int64_t i) { return xr[i] * xr[i]; }) / static_cast<float>(dim);
    const float s = 1.0f / std::sqrt(mean_square + eps);
    rstd[r] = s;
    for (std::int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * s) * weight[i];
  }
}

WAN_VECTOR_CLONES
void rms_norm_backward_rows(const float* g, const float* x, const float* weight, const float* rstd, float* dx,
                            float* weight_grad_partial, std::int64_t begin, std::int64_t end, std::int64_t dim) {
  for (std::int64_t r = begin; r < end; ++r) {
    const float* gr = g + r * dim;
    const float* xr = x + r * dim;
    float* dxr = dx + r * dim;
    const float s = rstd[r];
    const float dot = lane_sum(dim, [&](std::int64_t i) { return (gr[i] * weight[i]) * (xr[i] * s); });
    const float mean_dot = dot / static_cast<float>(dim);
    for (std::int64_t i = 0; i < dim; ++i) {
      const float n = xr[i] * s;
      dxr[i] = s * (gr[i] * weight[i] - n * mean_dot);
      weight_grad_partial[i] += gr[i] * n;
    }
  }
}

WAN_VECTOR_CLONES
void gelu_tanh(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * gelu_gate(x[i]).s;
}

WAN_VECTOR_CLONES
void gelu_tanh_backward(const float* g, const float* x, float* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const GeluGate gate = gelu_gate(v);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * (v * v));
    dx[i] = g[i] * (gate.s + v * gate.s_one_minus_s * (2.0f * du));
  }
}

WAN_VECTOR_CLONES
void modulated_layer_norm_rows(const float* x, const float* scale, const float* shift, float* y, float* mean,
                               float* rstd, std::int64_t begin, std::int64_t end, std::int64_t dim,
                               std::int64_t rows_per_modulation, float eps) {
  const float inverse_dim = 1.0f / static_cast<float>(dim);
  for (std::int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * dim;
    const float* sc = scale + (r / rows_per_modulation) * dim;
    const float* sh = shift + (r / rows_per_modulation) * dim;
    float* yr = y + r * dim;
    const float m = lane_sum(dim, [&](std::int64_t i) { return xr[i]; }) * inverse_dim;
    const float variance = lane_sum(dim, [&](std::int64_t i) { return (xr[i] - m) * (xr[i] - m); }) * inverse_dim;
    const float s = 1.0f / std::sqrt(variance + eps);
    mean[r] = m;
    rstd[r] = s;
    for (std::int64_t i = 0; i < dim; ++i) yr[i] = ((xr[i] - m) * s) * (1.0f + sc[i]) + sh[i];
  }
}

WAN_VECTOR_CLONES
void modulated_layer_norm_backward_rows(const float* g, const float* x, const float* scale, const float* mean,
                                        const float* rstd, float* dx, float* scale_grad, float* shift_grad,
                                        std::int64_t begin, std::int64_t end, std::int64_t dim,
                                        std::int64_t rows_per_modulation) {
  const float inverse_dim = 1.0f / static_cast<float>(dim);
  const std::int64_t first_modulation = begin / rows_per_modulation;
  for (std::int64_t r = begin; r < end; ++r) {
    const float* gr = g + r * dim;
    const float* xr = x + r * dim;
    const float* sc = scale + (r / rows_per_modulation) * dim;
    float* scg = scale_grad + (r / rows_per_modulation - first_modulation) * dim;
    float* shg = shift_grad + (r / rows_per_modulation - first_modulation) * dim;
    float* dxr = dx + r * dim;
    const float m = mean[r], s = rstd[r];
    const float sum_g = lane_sum(dim, [&](std::int64_t i) { return gr[i] * (1.0f + sc[i]); });
    const float sum_gx = lane_sum(dim, [&](std::int64_t i) { return (gr[i] * (1.0f + sc[i])) * ((xr[i] - m) * s); });
    const float mean_g = sum_g * inverse_dim, mean_gx = sum_gx * inverse_dim;
    for (std::int64_t i = 0; i < dim; ++i) {
      const float x_hat = (xr[i] - m) * s;
      dxr[i] = s * ((gr[i] * (1.0f + sc[i]) - mean_g) - x_hat * mean_gx);
      scg[i] += gr[i] * x_hat;
      shg[i] += gr[i];
    }
  }
}

}  // namespace wan::kernels
