#pragma once
// Animated GIF encoding (giflib) of 8-bit RGB frames: TensorBoard's image dashboard plays GIF
// bytes put in an image summary.

#include <cstdint>
#include <string>

namespace wanfw::tb {

/// An animated GIF89a of `frames` RGB frames (height x width x 3 bytes each, back to back) that
/// loops forever, each frame shown round(100 / fps) hundredths of a second (GIF's unit). Each
/// frame has its own 256-colour palette (median cut, each entry the mean of its pixels), so the
/// colours stay close to the frames'.
std::string encode_gif(const std::uint8_t* pixels, int frames, int height, int width, double fps);

}  // namespace wanfw::tb
