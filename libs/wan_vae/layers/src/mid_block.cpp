#include "wan/vae/mid_block.hpp"

#include <ATen/ATen.h>
#include <torch/torch.h>

namespace wan {

VaeAttentionBlockImpl::VaeAttentionBlockImpl(std::int64_t dim) {
  norm_ = register_module("norm", VaeRmsNorm(dim, true));
  to_qkv_ = register_module("to_qkv", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, 3 * dim, 1)));
  proj_ = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, 1)));
}

at::Tensor VaeAttentionBlockImpl::forward(const at::Tensor& x) {
  const std::int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
  at::Tensor y = norm_->forward(x.permute({0, 2, 1, 3, 4}).reshape({b * t, c, h, w}));
  const at::Tensor qkv = to_qkv_->forward(y).reshape({b * t, 1, 3 * c, h * w}).permute({0, 1, 3, 2}).contiguous();
  const auto parts = qkv.chunk(3, -1);
  y = at::scaled_dot_product_attention(parts[0], parts[1], parts[2]);  // [bt, 1, hw, c]
  y = proj_->forward(y.squeeze(1).permute({0, 2, 1}).reshape({b * t, c, h, w}));
  return y.view({b, t, c, h, w}).permute({0, 2, 1, 3, 4}) + x;
}

VaeMidBlockImpl::VaeMidBlockImpl(std::int64_t dim) {
  torch::nn::ModuleList resnets, attentions;
  first_ = VaeResidualBlock(dim, dim);
  second_ = VaeResidualBlock(dim, dim);
  attention_ = VaeAttentionBlock(dim);
  resnets->push_back(first_);
  resnets->push_back(second_);
  attentions->push_back(attention_);
  register_module("resnets", resnets);
  register_module("attentions", attentions);
}

at::Tensor VaeMidBlockImpl::forward(const at::Tensor& x, FeatureCache* cache) {
  return second_->forward(attention_->forward(first_->forward(x, cache)), cache);
}

}  // namespace wan
