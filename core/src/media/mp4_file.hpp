#pragma once
// Video files: frames to an mp4 that players, browsers and editors open, through
// libwanfw_mp4_writer (core/mp4_writer: FFmpeg's libraries), which is opened the first time a
// video is written, so processes that write none do not load FFmpeg.

#include <cstdint>
#include <filesystem>
#include <string>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// What write_mp4 wrote.
struct Mp4Written {
  std::string encoder;  ///< "libx264" (H.264) or "mpeg4" (MPEG-4 part 2)
  std::int64_t width = 0, height = 0, frames = 0;
};

/// Whether this build can write mp4 files: libwanfw_mp4_writer sits beside libwanfw_core (a build
/// configured with -DWANFW_MP4_WRITER=OFF, for a machine without FFmpeg, has none).
bool mp4_writer_available();

/// Writes frames [F, H, W, 3] uint8 (RGB, on the CPU) to `path` as an mp4 playing at `fps`.
/// H.264 (libx264, CRF 18, yuv420p) where this libavcodec has it, else MPEG-4 part 2 (qscale 2).
/// yuv420p halves chroma, so an odd width or height gets its last column or row repeated. The
/// file appears whole under its name or not at all; failures raise FileError naming it.
Mp4Written write_mp4(const std::filesystem::path& path, const at::Tensor& frames, double fps);

}  // namespace wanfw
