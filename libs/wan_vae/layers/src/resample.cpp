#include "wan/vae/resample.hpp"

#include <ATen/ATen.h>
#include <torch/torch.h>

namespace wan {

namespace {

using Slot = FeatureCache::Slot;

/// x2 nearest ("nearest-exact" picks the same source pixels for an exact x2), in float32.
at::Tensor upsample_x2(const at::Tensor& x) {
  const at::Tensor wide = x.to(at::kFloat);
  return at::_upsample_nearest_exact2d(wide, {2 * x.size(2), 2 * x.size(3)}).to(x.scalar_type());
}

}  // namespace

ResampleImpl::ResampleImpl(std::int64_t dim, ResampleMode mode, std::int64_t upsample_out) : mode_(mode) {
  const bool up = mode == ResampleMode::Upsample2d || mode == ResampleMode::Upsample3d;
  if (up)
    resample_ = torch::nn::Sequential(torch::nn::Functional(upsample_x2),
                                      torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, upsample_out, 3).padding(1)));
  else
    resample_ = torch::nn::Sequential(torch::nn::ZeroPad2d(torch::nn::ZeroPad2dOptions({0, 1, 0, 1})),
                                      torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, 3).stride(2)));
  register_module("resample", resample_);
  if (mode == ResampleMode::Upsample3d)
    time_conv_ = register_module("time_conv", CausalConv3d(dim, 2 * dim, std::array<std::int64_t, 3>{3, 1, 1},
                                                          std::array<std::int64_t, 3>{1, 0, 0}));
  if (mode == ResampleMode::Downsample3d)
    time_conv_ = register_module("time_conv", CausalConv3d(dim, dim, std::array<std::int64_t, 3>{3, 1, 1},
                                                          std::array<std::int64_t, 3>{0, 0, 0},
                                                          std::array<std::int64_t, 3>{2, 1, 1}));
}

at::Tensor ResampleImpl::forward(const at::Tensor& input, FeatureCache* cache) {
  at::Tensor x = input;
  const std::int64_t b = x.size(0), c = x.size(1), h = x.size(3), w = x.size(4);
  if (mode_ == ResampleMode::Upsample3d && cache != nullptr) {
    Slot& slot = cache->next();
    if (slot.kind == Slot::Kind::Empty) {
      slot.kind = Slot::Kind::Rep;  // the first chunk: no new frames
    } else {
      const std::int64_t t = x.size(2);
      at::Tensor keep = last_frames(x, 2).clone();
      if (keep.size(2) < 2)
        keep = at::cat({slot.kind == Slot::Kind::Frames ? last_frames(slot.frames, 1) : at::zeros_like(keep), keep}, 2);
      x = time_conv_->forward(x, slot.kind == Slot::Kind::Frames ? slot.frames : at::Tensor());
      slot.kind = Slot::Kind::Frames;
      slot.frames = std::move(keep);
      x = x.reshape({b, 2, c, t, h, w});
      x = at::stack({x.select(1, 0), x.select(1, 1)}, 3).reshape({b, c, 2 * t, h, w});
    }
  }
  const std::int64_t t = x.size(2);
  x = x.permute({0, 2, 1, 3, 4}).reshape({b * t, c, h, w});
  x = resample_->forward(x);
  x = x.view({b, t, x.size(1), x.size(2), x.size(3)}).permute({0, 2, 1, 3, 4});
  if (mode_ == ResampleMode::Downsample3d && cache != nullptr) {
    Slot& slot = cache->next();
    at::Tensor keep = last_frames(x, 1).clone();  // only the last frame is ever read back
    if (slot.kind != Slot::Kind::Empty) x = time_conv_->forward(at::cat({last_frames(slot.frames, 1), x}, 2));
    slot.kind = Slot::Kind::Frames;
    slot.frames = std::move(keep);
  }
  return x;
}

}  // namespace wan
