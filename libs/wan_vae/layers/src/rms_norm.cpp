#include "wan/vae/rms_norm.hpp"

#include <cmath>

#include <ATen/ATen.h>
#include <torch/torch.h>

namespace wan {

VaeRmsNormImpl::VaeRmsNormImpl(std::int64_t channels, bool images) : scale_(std::sqrt(static_cast<double>(channels))) {
  gamma = register_parameter("gamma", images ? torch::ones({channels, 1, 1}) : torch::ones({channels, 1, 1, 1}));
}

at::Tensor VaeRmsNormImpl::forward(const at::Tensor& x) {
  const bool narrow = x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf;
  const at::Tensor wide = narrow ? x.to(at::kFloat) : x;
  // F.normalize: x / max(||x||_2, eps) along the channels.
  const at::Tensor norm = at::linalg_vector_norm(wide, 2, {1}, /*keepdim=*/true).clamp_min(1e-12);
  // In place after the division: the same products in the same order, one tensor of x's size.
  at::Tensor y = (wide / norm).to(x.scalar_type());
  return y.mul_(scale_).mul_(gamma);
}

at::Tensor silu_in_place(at::Tensor x) {
  at::silu_(x);
  return x;
}

}  // namespace wan
