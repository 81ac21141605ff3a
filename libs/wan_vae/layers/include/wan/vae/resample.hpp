#pragma once
// The Wan VAE's resampling between stages. Spatial: a x2 nearest upsample (in float32) and a 3x3
// convolution, or a zero pad on the right and bottom and a strided 3x3 convolution, frame by
// frame. Temporal, through the causal cache: upsample3d doubles the frames with `time_conv`
// (channels [0, C) become frame 2i, [C, 2C) frame 2i+1) from the second chunk on; downsample3d
// halves them with a stride-2 `time_conv` over the previous chunk's last frame and this chunk's.
// Parameters: `resample.1.{weight,bias}` (the 2D convolution) and `time_conv.{weight,bias}`.

#include <cstdint>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include "wan/vae/causal_conv3d.hpp"
#include "wan/vae/feature_cache.hpp"

namespace wan {

enum class ResampleMode { Upsample2d, Upsample3d, Downsample2d, Downsample3d };

class ResampleImpl : public torch::nn::Module {
 public:
  /// `upsample_out`: the upsampling convolution's output channels (Wan2.1: dim / 2; Wan2.2: dim).
  ResampleImpl(std::int64_t dim, ResampleMode mode, std::int64_t upsample_out);
  at::Tensor forward(const at::Tensor& x, FeatureCache* cache);

 private:
  ResampleMode mode_;
  torch::nn::Sequential resample_{nullptr};
  CausalConv3d time_conv_{nullptr};
};
TORCH_MODULE(Resample);

}  // namespace wan
