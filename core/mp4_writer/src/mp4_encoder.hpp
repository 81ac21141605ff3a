#pragma once
// The encoder behind libwanfw_mp4_writer's C functions: RGB frames in, H.264 (libx264) or MPEG-4
// part 2 out, through FFmpeg's libraries, into an mp4 written whole or fragment by fragment.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

namespace wanfw_mp4 {

/// A failure: what went wrong, and the hint for the user ("" for none).
struct Failure : std::runtime_error {
  std::string hint;
  Failure(const std::string& what, std::string h = "") : std::runtime_error(what), hint(std::move(h)) {}
};

/// The size yuv420p can store: an odd one grows by a repeated last row or column.
inline int even(int size) { return size + size % 2; }

/// What one mp4 holds open while it is written.
struct Muxer {
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* packet = nullptr;
  SwsContext* scaler = nullptr;
  ~Muxer();
};

/// An mp4 being written: frames appended in order, then finish(). `fragmented`: its moov first
/// and a fragment at each key frame (every 12 frames), so players read the file as it grows.
/// Throws Failure.
class Encoder {
 public:
  Encoder(const std::string& file, int height, int width, double fps, bool fragmented);
  const std::string& name() const { return name_; }
  /// `frames` frames of height x width x 3 bytes (RGB), back to back; what the encoder lets go
  /// reaches the file before it returns.
  void append(const std::uint8_t* rgb, std::int64_t frames);
  /// The encoder's last frames, the trailer, the file closed.
  void finish();

 private:
  Muxer m_;
  AVStream* stream_ = nullptr;
  int height_, width_, even_height_, even_width_;
  std::int64_t next_pts_ = 0;
  std::vector<std::uint8_t> padded_;
  std::string name_;
};

}  // namespace wanfw_mp4
