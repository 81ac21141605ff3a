#include "causal_conv3d.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/init.h>

namespace wan {

CausalConv3dImpl::CausalConv3dImpl(std::int64_t in, std::int64_t out, std::array<std::int64_t, 3> kernel,
                                   std::array<std::int64_t, 3> padding, std::array<std::int64_t, 3> stride)
    : padding_(padding), stride_(stride) {
  weight = register_parameter("weight", torch::empty({out, in, kernel[0], kernel[1], kernel[2]}));
  bias = register_parameter("bias", torch::empty({out}));
  // nn.Conv3d's initialisation; loaded weights replace it.
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in * kernel[0] * kernel[1] * kernel[2]));
  torch::nn::init::uniform_(bias, -bound, bound);
}

at::Tensor CausalConv3dImpl::forward(const at::Tensor& x, const at::Tensor& previous) {
  std::vector<std::int64_t> pad = {padding_[2], padding_[2], padding_[1], padding_[1], 2 * padding_[0], 0};
  at::Tensor input = x;
  if (previous.defined() && pad[4] > 0) {
    input = at::cat({previous.to(x.device()), x}, 2);
    pad[4] -= previous.size(2);
  }
  input = at::constant_pad_nd(input, pad, 0);
  return at::conv3d(input, weight, bias, {stride_[0], stride_[1], stride_[2]});
}

at::Tensor last_frames(const at::Tensor& x, std::int64_t count) {
  const std::int64_t frames = x.size(2);
  return x.narrow(2, std::max<std::int64_t>(frames - count, 0), std::min(frames, count));
}

at::Tensor cached_conv(CausalConv3dImpl& conv, const at::Tensor& x, FeatureCache* cache) {
  if (cache == nullptr) return conv.forward(x);
  FeatureCache::Slot& slot = cache->next();
  at::Tensor keep = last_frames(x, 2).clone();
  if (keep.size(2) < 2 && slot.kind == FeatureCache::Slot::Kind::Frames)
    keep = at::cat({last_frames(slot.frames, 1), keep}, 2);
  at::Tensor y = conv.forward(x, slot.kind == FeatureCache::Slot::Kind::Frames ? slot.frames : at::Tensor());
  slot.kind = FeatureCache::Slot::Kind::Frames;
  slot.frames = std::move(keep);
  return y;
}

}  // namespace wan
