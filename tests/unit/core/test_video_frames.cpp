#include <torch/torch.h>

#include "media/video_frames.hpp"
#include <doctest/doctest.h>

using namespace wanfw;

TEST_CASE("a video in [-1, 1] becomes rounded 8-bit RGB frames, values outside clamped") {
  // [3, F=2, H=1, W=3]: -1 -> 0, 1 -> 255, 0 -> 127.5 -> 128 (half to even), beyond +-1 clamped.
  const at::Tensor video = torch::tensor({-1.0F, 0.0F, 1.0F, -2.0F, 0.5F, 3.0F}).view({1, 2, 1, 3}).repeat({3, 1, 1, 1});
  const at::Tensor frames = video_frames(video);
  CHECK(frames.sizes().vec() == std::vector<std::int64_t>{2, 1, 3, 3});
  CHECK((frames.scalar_type() == at::kByte));
  CHECK(frames.select(3, 0).flatten().equal(torch::tensor({0, 128, 255, 0, 191, 255}, torch::kUInt8)));
  CHECK(frames.select(3, 0).equal(frames.select(3, 2)));  // channels go last, each its own plane
}

TEST_CASE("the strip holds evenly spaced frames, the first and the last included") {
  const at::Tensor frames = torch::arange(9, torch::kUInt8).view({9, 1, 1, 1}).expand({9, 2, 3, 3}).contiguous();
  const at::Tensor strip = frame_strip(frames, 8);
  CHECK(strip.sizes().vec() == std::vector<std::int64_t>{2, 8 * 3, 3});
  std::vector<int> shown;
  for (int i = 0; i < 8; ++i) shown.push_back(strip[0][i * 3][0].item<int>());
  CHECK(shown == std::vector<int>{0, 1, 2, 3, 5, 6, 7, 8});
  CHECK(frame_strip(frames.narrow(0, 0, 3), 8).size(1) == 3 * 3);  // fewer frames: every one
}

TEST_CASE("frames wider than the limit are scaled down with their aspect; narrower ones stay as they are") {
  const at::Tensor flat = torch::full({2, 480, 832, 3}, 200, torch::kUInt8);
  const at::Tensor small = fit_width(flat, 320);
  CHECK(small.sizes().vec() == std::vector<std::int64_t>{2, 185, 320, 3});  // 480 * 320 / 832 = 184.6
  CHECK(small.eq(200).all().item<bool>());                  // a flat colour stays that colour
  const at::Tensor narrow = torch::zeros({1, 48, 64, 3}, torch::kUInt8);
  CHECK(fit_width(narrow, 320).data_ptr() == narrow.data_ptr());
}
