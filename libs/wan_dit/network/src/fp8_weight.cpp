#include "wan/fp8_weight.hpp"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

namespace wan {

namespace {

constexpr std::int64_t kBlock = 64;

/// `t` viewed so that one scale covers each slice over its last dimension(s): [out, in/64, 64],
/// [out, in] or [1, numel].
torch::Tensor grouped(const torch::Tensor& t, Fp8Scaling scaling) {
  switch (scaling) {
    case Fp8Scaling::Block64:
      return t.reshape({t.size(0), t.size(1) / kBlock, kBlock});
    case Fp8Scaling::PerChannel:
      return t;
    case Fp8Scaling::PerTensor:
      return t.reshape({1, t.numel()});
  }
  return t;
}

/// The scale tensor's shape for `scaling` (what a loader reads the layout from).
torch::Tensor shaped_scales(const torch::Tensor& scales, Fp8Scaling scaling) {
  return scaling == Fp8Scaling::PerTensor ? scales.reshape({1}) : scales;
}

struct Fp8Linear : torch::autograd::Function<Fp8Linear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& bias,
                               const torch::Tensor& values, const torch::Tensor& scales, std::int64_t scaling) {
    const Fp8Weight weight{values, scales, static_cast<Fp8Scaling>(scaling)};
    ctx->save_for_backward({values, scales});  // fp8 and float32 scales: never the dequantized copy
    ctx->saved_data["scaling"] = scaling;
    ctx->saved_data["has_bias"] = bias.defined();
    const torch::Tensor w = dequantize_fp8(weight, x.scalar_type());
    return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Fp8Weight weight{saved[0], saved[1], static_cast<Fp8Scaling>(ctx->saved_data["scaling"].toInt())};
    const torch::Tensor& grad = grads[0];
    const torch::Tensor grad_x = grad.matmul(dequantize_fp8(weight, grad.scalar_type()));
    torch::Tensor grad_bias;
    if (ctx->saved_data["has_bias"].toBool()) grad_bias = grad.reshape({-1, grad.size(-1)}).sum(0);
    return {grad_x, grad_bias, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

Fp8Scaling fp8_scaling(const std::vector<std::int64_t>& shape) {
  if (shape.size() != 2) return Fp8Scaling::PerTensor;
  return shape[1] % kBlock == 0 ? Fp8Scaling::Block64 : Fp8Scaling::PerChannel;
}

double fp8_stored_bytes(const std::vector<std::int64_t>& shape) {
  double values = 1;
  for (const std::int64_t d : shape) values *= static_cast<double>(d);
  double scales = 1;
  switch (fp8_scaling(shape)) {
    case Fp8Scaling::Block64:
      scales = values / kBlock;
      break;
    case Fp8Scaling::PerChannel:
      scales = static_cast<double>(shape[0]);
      break;
    case Fp8Scaling::PerTensor:
      break;
  }
  return values + 4 * scales;  // e4m3 values, float32 scales
}

Fp8Weight quantize_fp8(const torch::Tensor& weight) {
  at::NoGradGuard no_grad;
  Fp8Weight out;
  out.scaling = fp8_scaling(weight.sizes().vec());
  const torch::Tensor w = torch::nan_to_num(grouped(weight.to(torch::kFloat32), out.scaling), 0.0, 0.0, 0.0);
  const torch::Tensor absmax = w.abs().amax(-1, /*keepdim=*/true);
  const torch::Tensor scales = (absmax / kFp8Max).clamp_min(std::ldexp(1.0, -126));
  out.values = (w / scales).clamp(-kFp8Max, kFp8Max).to(at::kFloat8_e4m3fn).reshape(weight.sizes());
  out.scales = shaped_scales(scales, out.scaling);
  return out;
}

torch::Tensor dequantize_fp8(const Fp8Weight& weight, torch::ScalarType dtype) {
  const torch::Tensor scales = weight.scaling == Fp8Scaling::PerTensor ? weight.scales.reshape({1, 1}) : weight.scales;
  const torch::Tensor product = grouped(weight.values.to(torch::kFloat32), weight.scaling) * scales;
  return product.reshape(weight.values.sizes()).to(dtype);
}

torch::Tensor fp8_linear(const torch::Tensor& x, const Fp8Weight& weight, const torch::Tensor& bias) {
  return Fp8Linear::apply(x, bias, weight.values, weight.scales, static_cast<std::int64_t>(weight.scaling));
}

}  // namespace wan
