#pragma once
// The parameter-free reshapes of the Wan2.2 VAE: its residual shortcuts (AvgDown3D: frames and
// pixels folded into channels and averaged in groups; DupUp3D: channels repeated and unfolded
// into frames and pixels) and the 2x2 patchify around the whole VAE.

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace wan {

/// Down by `ft` frames and `fs` x `fs` pixels to `out` channels; the frames are zero-padded in front
/// to a multiple of `ft` (a one-frame chunk averages a zero frame with it).
at::Tensor average_down(const at::Tensor& x, std::int64_t out, std::int64_t ft, std::int64_t fs);

/// Up by `ft` frames and `fs` x `fs` pixels to `out` channels; `first_chunk` drops the first ft - 1
/// frames (the first latent frame becomes one frame).
at::Tensor duplicate_up(const at::Tensor& x, std::int64_t out, std::int64_t ft, std::int64_t fs, bool first_chunk);

/// [B, C, F, H, W] -> [B, C p^2, F, H/p, W/p], channel c p^2 + r p + q for the pixel at width offset
/// r and height offset q; unpatchify is its inverse. p = 1: the tensor itself.
at::Tensor patchify(const at::Tensor& x, std::int64_t p);
at::Tensor unpatchify(const at::Tensor& x, std::int64_t p);

}  // namespace wan
