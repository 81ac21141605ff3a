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

/// An mp4 written as its frames come: each append() encodes them into `path` (a fragmented mp4,
/// its header first, a fragment at each key frame), so players read the file while it grows.
/// The same encoder and settings as write_mp4. finish() ends the file; a stream dropped without
/// it ends the file too, and a failure leaves what was written.
class Mp4Stream {
 public:
  Mp4Stream(std::filesystem::path path, double fps);
  ~Mp4Stream();
  Mp4Stream(const Mp4Stream&) = delete;
  Mp4Stream& operator=(const Mp4Stream&) = delete;
  /// Frames [F, H, W, 3] uint8 (RGB), the next ones; every call the same H and W.
  void append(const at::Tensor& frames);
  Mp4Written finish();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  double fps_;
  void* stream_ = nullptr;
  Mp4Written written_;
};

}  // namespace wanfw
