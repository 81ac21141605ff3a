#include "wan/vae/causal_conv3d.hpp"

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

at::Tensor CausalConv3dImpl::forward(at::Tensor x, const at::Tensor& previous) {
  const std::int64_t front = 2 * padding_[0], ph = padding_[1], pw = padding_[2];
  const std::vector<std::int64_t> stride = {stride_[0], stride_[1], stride_[2]};
  if (front == 0 && ph == 0 && pw == 0) return at::conv3d(x, weight, bias, stride);
  // One padded input: zeros, the previous chunk's frames, then x, framed by zero pixels (as
  // concatenating and then padding, without the concatenation's copy).
  const std::int64_t cached = previous.defined() && front > 0 ? previous.size(2) : 0;
  const std::int64_t t = x.size(2), h = x.size(3), w = x.size(4);
  at::Tensor input = at::zeros({x.size(0), x.size(1), front + t, h + 2 * ph, w + 2 * pw}, x.options());
  const auto inside = [&](std::int64_t first, std::int64_t frames) {
    return input.narrow(2, first, frames).narrow(3, ph, h).narrow(4, pw, w);
  };
  if (cached > 0) inside(front - cached, cached).copy_(previous);
  inside(front, t).copy_(x);
  x.reset();
  return at::conv3d(input, weight, bias, stride);
}

at::Tensor last_frames(const at::Tensor& x, std::int64_t count) {
  const std::int64_t frames = x.size(2);
  return x.narrow(2, std::max<std::int64_t>(frames - count, 0), std::min(frames, count));
}

at::Tensor cached_conv(CausalConv3dImpl& conv, at::Tensor x, FeatureCache* cache) {
  if (cache == nullptr) return conv.forward(std::move(x));
  FeatureCache::Slot& slot = cache->next();
  at::Tensor keep = last_frames(x, 2).clone();
  if (keep.size(2) < 2 && slot.kind == FeatureCache::Slot::Kind::Frames)
    keep = at::cat({last_frames(slot.frames, 1), keep}, 2);
  at::Tensor y = conv.forward(std::move(x), slot.kind == FeatureCache::Slot::Kind::Frames ? slot.frames : at::Tensor());
  slot.kind = FeatureCache::Slot::Kind::Frames;
  slot.frames = std::move(keep);
  return y;
}

}  // namespace wan
