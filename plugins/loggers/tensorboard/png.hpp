#pragma once
// PNG encoding of 8-bit images (zlib), for TensorBoard's image summaries.

#include <cstdint>
#include <string>

namespace wanfw::tb {

/// PNG of 8-bit pixels, rows top to bottom, `channels` interleaved (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA).
std::string encode_png(const std::uint8_t* pixels, int height, int width, int channels);

}  // namespace wanfw::tb
