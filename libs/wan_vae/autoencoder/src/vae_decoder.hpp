#pragma once
// The Wan VAE's decoder: conv_in, the middle, the up blocks, norm_out -> SiLU -> conv_out, one
// latent frame per call through the causal cache (the first becomes one frame, each later one
// four). Wan2.1's up blocks are residual blocks and an upsampler (`upsamplers.0`) that halves the
// width; Wan2.2's add a duplicating shortcut around them (`upsampler`, widths kept).

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

class VaeDecoderImpl : public torch::nn::Module {
 public:
  explicit VaeDecoderImpl(const VaeConfig& config);
  /// `first_chunk`: the video's first latent frame.
  at::Tensor forward(const at::Tensor& x, FeatureCache* cache, bool first_chunk);

 private:
  using Step = std::function<at::Tensor(const at::Tensor&, FeatureCache*, bool)>;
  CausalConv3d conv_in_{nullptr}, conv_out_{nullptr};
  VaeMidBlock mid_{nullptr};
  std::vector<Step> up_;
  VaeRmsNorm norm_out_{nullptr};
};
TORCH_MODULE(VaeDecoder);

}  // namespace wan
