#pragma once
// A 3D convolution causal in time: it pads 2p frames in front (none behind) and p pixels on each
// side of H and W, so frame t of its output sees input frames up to t. Given the cache of the
// previous chunk, those front frames are the previous chunk's last frames instead of zeros.
// Parameters `weight` and `bias`, as diffusers and the official checkpoints name them.

#include <array>
#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "wan/vae/feature_cache.hpp"

namespace wan {

class CausalConv3dImpl : public torch::nn::Module {
 public:
  CausalConv3dImpl(std::int64_t in, std::int64_t out, std::array<std::int64_t, 3> kernel,
                   std::array<std::int64_t, 3> padding = {0, 0, 0}, std::array<std::int64_t, 3> stride = {1, 1, 1});

  /// `previous`: the last frames of the previous chunk's input (undefined: zeros). Takes `x` by
  /// value and lets it go once copied into the padded input: a caller that moves a temporary in
  /// does not hold it through the convolution.
  at::Tensor forward(at::Tensor x, const at::Tensor& previous = {});
  /// Whether it pads in time, so that a cache changes its output.
  bool causal() const { return padding_[0] > 0; }

  at::Tensor weight, bias;

 private:
  std::array<std::int64_t, 3> padding_, stride_;
};
TORCH_MODULE(CausalConv3d);

/// `conv` of `x` through the cache: the slot's frames go in front, and the slot then keeps the last
/// two frames of `x` (with the slot's last one in front when `x` has one frame). Without a cache,
/// the plain convolution.
at::Tensor cached_conv(CausalConv3dImpl& conv, at::Tensor x, FeatureCache* cache);

/// The last `count` frames (dim 2) of `x`, or all of them when it has fewer.
at::Tensor last_frames(const at::Tensor& x, std::int64_t count);

}  // namespace wan
