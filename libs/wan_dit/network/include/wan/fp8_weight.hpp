#pragma once
// A frozen weight stored in float8 e4m3 with scales: a quarter of its float32 bytes, half its
// bfloat16 ones. Scales take the largest magnitude of a block of 64 values along the input
// dimension to 448 (e4m3's largest finite value); a matrix whose input size 64 does not divide
// gets one scale per output channel, any other tensor one scale. The scales stay float32, so
// quantizing and dequantizing use the same value.
//
// The error bound (docs/low-memory.md): with u = w / s in [-448, 448], e4m3 rounds u to the nearest
// of its values, 3 mantissa bits apart: |u - q(u)| <= 2^-4 |u| where |u| >= 2^-6 (normal) and
// <= 2^-10 below (subnormal). So |w - dequantize(w)| <= max(2^-4 |w|, 2^-10 s), plus one float32
// rounding of the product q s.
//
// fp8_linear runs y = x W^T + b with W dequantized for the product and saves only the fp8 values
// and scales for backward, where it dequantizes again: the dequantized copy never outlives a call.

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace wan {

/// How a weight's scales are laid out, which their shape also says.
enum class Fp8Scaling {
  Block64,     ///< [out, in] with in % 64 == 0: scales [out, in / 64, 1]
  PerChannel,  ///< [out, in] otherwise: scales [out, 1]
  PerTensor,   ///< any other rank: scales [1]
};

struct Fp8Weight {
  torch::Tensor values;  ///< float8_e4m3fn, the weight's shape
  torch::Tensor scales;  ///< float32, shaped by `scaling`
  Fp8Scaling scaling = Fp8Scaling::PerTensor;
};

/// The scales' layout quantize_fp8 gives a weight of `shape`.
Fp8Scaling fp8_scaling(const std::vector<std::int64_t>& shape);

/// Bytes of a weight of `shape` stored in fp8: one byte a value and a float32 scale for each
/// block of 64 inputs, each row, or the tensor (fp8_scaling).
double fp8_stored_bytes(const std::vector<std::int64_t>& shape);

/// The largest finite e4m3 value: a block's largest magnitude quantizes to it exactly.
constexpr double kFp8Max = 448.0;

/// `weight` (any floating dtype) quantized: scales absmax / 448 (at least 2^-126, so an all-zero
/// block stays zero), values clamp(w / s, ±448) in e4m3; NaN becomes 0.
Fp8Weight quantize_fp8(const torch::Tensor& weight);

/// values x scales in `dtype` (float32 product, then rounded once to `dtype`).
torch::Tensor dequantize_fp8(const Fp8Weight& weight, torch::ScalarType dtype);

/// x W^T (+ bias) with W = dequantize_fp8(weight, x's dtype), differentiable in `x` and `bias` only
/// (the weight is frozen). Backward dequantizes W again instead of keeping it.
torch::Tensor fp8_linear(const torch::Tensor& x, const Fp8Weight& weight, const torch::Tensor& bias);

}  // namespace wan
