#pragma once
// Video as pictures: a decoded video in [-1, 1] to 8-bit RGB frames, a strip of frames for an
// image summary, a generated video of any range (latents) as a strip, and frames scaled down to a
// width a dashboard loads fast.

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// One sample's video [3, F, H, W] (any floating dtype and device), values in [-1, 1] -> frames
/// [F, H, W, 3] uint8 on the CPU: round((v + 1) / 2 * 255), v clamped to [-1, 1] first.
at::Tensor video_frames(const at::Tensor& video);

/// `count` frames spaced evenly from the first to the last (every frame when there are fewer),
/// side by side: [H, n * W, 3] uint8.
at::Tensor frame_strip(const at::Tensor& frames, std::int64_t count);

/// A generated video [C, F, H, W] of any range (a model's latents) as one picture [H', F * W', 3]
/// uint8 on the CPU: channels 0-2 (or the only one, as grey) as RGB, each stretched from its
/// smallest to its largest value to 0..255, the frames side by side, enlarged (nearest) to about
/// 128 pixels high.
at::Tensor latent_strip(const at::Tensor& video);

/// The frames [F, H, W, 3] uint8 scaled down (antialiased bilinear, aspect kept) to at most
/// `max_width` pixels wide; the same tensor when they are not wider.
at::Tensor fit_width(const at::Tensor& frames, std::int64_t max_width);

}  // namespace wanfw
