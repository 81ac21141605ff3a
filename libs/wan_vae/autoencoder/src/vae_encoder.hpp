#pragma once
// The Wan VAE's encoder: conv_in, the down blocks, the middle, norm_out -> SiLU -> conv_out (to
// 2 z channels: mean and log-variance), one chunk of frames per call through the causal cache.
// Wan2.1's down_blocks are a flat list of residual blocks and resamples; Wan2.2's are residual
// down blocks (`resnets`, `downsampler`, and an averaging shortcut around them).

#include <functional>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "wan/vae/causal_conv3d.hpp"
#include "wan/vae/feature_cache.hpp"
#include "wan/vae/mid_block.hpp"
#include "wan/vae/rms_norm.hpp"
#include "wan/vae/vae_config.hpp"

namespace wan {

class VaeEncoderImpl : public torch::nn::Module {
 public:
  explicit VaeEncoderImpl(const VaeConfig& config);
  at::Tensor forward(const at::Tensor& x, FeatureCache* cache);

 private:
  using Step = std::function<at::Tensor(const at::Tensor&, FeatureCache*)>;
  CausalConv3d conv_in_{nullptr}, conv_out_{nullptr};
  std::vector<Step> down_;
  VaeMidBlock mid_{nullptr};
  VaeRmsNorm norm_out_{nullptr};
};
TORCH_MODULE(VaeEncoder);

}  // namespace wan
