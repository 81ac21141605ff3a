#pragma once
// The Wan VAE's residual block: norm1 -> SiLU -> conv1 -> norm2 -> SiLU -> conv2, plus the input
// (through conv_shortcut, a 1x1x1 convolution, where the widths differ); both 3x3x3 convolutions
// run through the causal cache.

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "wan/vae/causal_conv3d.hpp"
#include "wan/vae/feature_cache.hpp"
#include "wan/vae/rms_norm.hpp"

namespace wan {

class VaeResidualBlockImpl : public torch::nn::Module {
 public:
  VaeResidualBlockImpl(std::int64_t in, std::int64_t out);
  at::Tensor forward(const at::Tensor& x, FeatureCache* cache);

 private:
  VaeRmsNorm norm1_{nullptr}, norm2_{nullptr};
  CausalConv3d conv1_{nullptr}, conv2_{nullptr}, shortcut_{nullptr};
};
TORCH_MODULE(VaeResidualBlock);

}  // namespace wan
