#include "wan/vae/residual_block.hpp"

#include <ATen/ATen.h>

namespace wan {

VaeResidualBlockImpl::VaeResidualBlockImpl(std::int64_t in, std::int64_t out) {
  const std::array<std::int64_t, 3> k3{3, 3, 3}, p1{1, 1, 1};
  norm1_ = register_module("norm1", VaeRmsNorm(in, false));
  conv1_ = register_module("conv1", CausalConv3d(in, out, k3, p1));
  norm2_ = register_module("norm2", VaeRmsNorm(out, false));
  conv2_ = register_module("conv2", CausalConv3d(out, out, k3, p1));
  if (in != out) shortcut_ = register_module("conv_shortcut", CausalConv3d(in, out, std::array<std::int64_t, 3>{1, 1, 1}));
}

at::Tensor VaeResidualBlockImpl::forward(const at::Tensor& x, FeatureCache* cache) {
  const at::Tensor h = shortcut_ ? shortcut_->forward(x) : x;
  // The norms' outputs are fresh tensors: SiLU and the residual add go in place.
  at::Tensor y = cached_conv(*conv1_, silu_in_place(norm1_->forward(x)), cache);
  at::Tensor normed = silu_in_place(norm2_->forward(y));
  y.reset();  // each activation lets go as soon as the next is made
  y = cached_conv(*conv2_, std::move(normed), cache);
  return y.add_(h);
}

}  // namespace wan
