#include <torch/torch.h>

#include "media/video_frames.hpp"
#include "wanfw/error.hpp"
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

TEST_CASE("a generated video of any range becomes a strip: channels 0-2 stretched to 0..255, frames side by side") {
  // [C=4, F=2, H=2, W=2]: channel c holds c * 10 + (0..7); the fourth channel is not shown.
  const at::Tensor video = (torch::arange(8, torch::kFloat32).view({1, 2, 2, 2}) +
                            torch::arange(4, torch::kFloat32).view({4, 1, 1, 1}) * 10);
  const at::Tensor strip = latent_strip(video);
  CHECK((strip.scalar_type() == at::kByte));
  CHECK(strip.sizes().vec() == std::vector<std::int64_t>{128, 2 * 2 * 64, 3});  // 2 px high, zoomed x64
  // Each channel's smallest value is 0 and its largest 255: frame 0's first pixel and frame 1's last.
  CHECK(strip[0][0].equal(torch::zeros({3}, torch::kUInt8)));
  CHECK(strip[127][255].equal(torch::full({3}, 255, torch::kUInt8)));
  // Pixel (h=0, w=1) of frame 1 holds 5 of 0..7: round(5 / 7 * 255) = 182, zoomed into 64 x 64.
  CHECK(strip[0][(2 + 1) * 64].equal(torch::full({3}, 182, torch::kUInt8)));
  // One channel is shown as grey.
  const at::Tensor grey = latent_strip(video.narrow(0, 0, 1));
  CHECK(grey.select(2, 0).equal(grey.select(2, 2)));
  CHECK_THROWS_WITH_AS(latent_strip(video[0]), doctest::Contains("a preview is a video [C, F, H, W]"), Error);
}
