#pragma once
// The middle of the Wan VAE's encoder and decoder: a residual block, single-head self-attention
// over each frame's pixels (unmasked), another residual block.

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "wan/vae/feature_cache.hpp"
#include "wan/vae/residual_block.hpp"
#include "wan/vae/rms_norm.hpp"

namespace wan {

/// Per frame: norm, to_qkv (a 1x1 convolution to 3C), attention with one head of width C, proj,
/// plus the input. Parameters `norm.gamma`, `to_qkv.*`, `proj.*`.
class VaeAttentionBlockImpl : public torch::nn::Module {
 public:
  explicit VaeAttentionBlockImpl(std::int64_t dim);
  at::Tensor forward(const at::Tensor& x);

 private:
  VaeRmsNorm norm_{nullptr};
  torch::nn::Conv2d to_qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(VaeAttentionBlock);

/// `resnets.0`, `attentions.0`, `resnets.1`.
class VaeMidBlockImpl : public torch::nn::Module {
 public:
  explicit VaeMidBlockImpl(std::int64_t dim);
  at::Tensor forward(const at::Tensor& x, FeatureCache* cache);

 private:
  VaeResidualBlock first_{nullptr}, second_{nullptr};
  VaeAttentionBlock attention_{nullptr};
};
TORCH_MODULE(VaeMidBlock);

}  // namespace wan
