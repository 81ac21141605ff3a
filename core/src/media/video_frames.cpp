#include "media/video_frames.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"

namespace wanfw {

namespace {

void check_frames(const at::Tensor& frames, const char* what) {
  if (frames.dim() != 4 || frames.size(3) != 3 || frames.scalar_type() != at::kByte)
    throw Error(fmt::format("{}: frames must be [F, H, W, 3] uint8, got {} {}", what, c10::str(frames.sizes()),
                            c10::toString(frames.scalar_type())));
}

}  // namespace

at::Tensor video_frames(const at::Tensor& video) {
  if (video.dim() != 4 || video.size(0) != 3 || !video.is_floating_point())
    throw Error(fmt::format("a video must be [3, F, H, W] floating point in [-1, 1], got {} {}",
                            c10::str(video.sizes()), c10::toString(video.scalar_type())));
  const at::Tensor unit = (video.detach().to(at::kCPU, at::kFloat).clamp(-1.0, 1.0) + 1.0) * 127.5;
  return unit.round().to(at::kByte).permute({1, 2, 3, 0}).contiguous();
}

at::Tensor frame_strip(const at::Tensor& frames, std::int64_t count) {
  check_frames(frames, "frame_strip");
  const std::int64_t total = frames.size(0);
  const std::int64_t n = std::clamp<std::int64_t>(count, 1, total);
  std::vector<at::Tensor> chosen;
  for (std::int64_t i = 0; i < n; ++i) {
    // Evenly spaced, first and last included: i * (total - 1) / (n - 1), rounded.
    const std::int64_t index = n == 1 ? 0 : (i * (total - 1) + (n - 1) / 2) / (n - 1);
    chosen.push_back(frames[index]);
  }
  return torch::cat(chosen, 1).contiguous();
}

at::Tensor fit_width(const at::Tensor& frames, std::int64_t max_width) {
  check_frames(frames, "fit_width");
  const std::int64_t height = frames.size(1), width = frames.size(2);
  if (width <= max_width) return frames;
  const std::int64_t new_height = std::max<std::int64_t>(1, std::llround(static_cast<double>(height) * max_width / width));
  const at::Tensor planes = frames.permute({0, 3, 1, 2}).to(at::kFloat);  // F, 3, H, W
  const at::Tensor scaled = at::_upsample_bilinear2d_aa(planes, {new_height, max_width}, /*align_corners=*/false);
  return scaled.round().clamp(0, 255).to(at::kByte).permute({0, 2, 3, 1}).contiguous();
}

at::Tensor latent_strip(const at::Tensor& video) {
  if (video.dim() != 4 || video.size(0) < 1)
    throw Error("a preview is a video [C, F, H, W]; the model returned " + std::to_string(video.dim()) + " dimensions",
                "return one sample's video from Model::preview, as sample() writes it");
  at::Tensor rgb = video.slice(0, 0, std::min<std::int64_t>(3, video.size(0))).to(torch::kCPU, torch::kFloat32);
  if (rgb.size(0) < 3) rgb = rgb.narrow(0, 0, 1).expand({3, -1, -1, -1}).contiguous();
  const at::Tensor lo = std::get<0>(rgb.flatten(1).min(1)).view({3, 1, 1, 1});
  const at::Tensor hi = std::get<0>(rgb.flatten(1).max(1)).view({3, 1, 1, 1});
  rgb = ((rgb - lo) / (hi - lo).clamp_min(1e-6) * 255).round().clamp(0, 255);
  at::Tensor strip = rgb.permute({2, 1, 3, 0}).reshape({rgb.size(2), rgb.size(1) * rgb.size(3), 3});  // H, F*W, 3
  const std::int64_t zoom = std::max<std::int64_t>(1, 128 / strip.size(0));
  strip = strip.repeat_interleave(zoom, 0).repeat_interleave(zoom, 1);
  return strip.to(torch::kUInt8).contiguous();
}

}  // namespace wanfw
