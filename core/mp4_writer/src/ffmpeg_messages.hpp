#pragma once
// FFmpeg's log while one file is written: its warnings and errors kept, each once, for the caller
// to log with the file they concern; everything quieter (an encoder's statistics, FFmpeg's
// banner-like notes) dropped. FFmpeg has one log callback a process; this library owns it.

#include <string>

namespace wanfw_mp4 {

/// Collects FFmpeg's warnings and errors from construction to destruction; one collector at a
/// time (the constructor waits for another to end).
class FfmpegMessages {
 public:
  FfmpegMessages();
  ~FfmpegMessages();
  FfmpegMessages(const FfmpegMessages&) = delete;
  FfmpegMessages& operator=(const FfmpegMessages&) = delete;

  /// The messages so far, one a line, each once, as "<component>: <message>".
  std::string text() const;
};

}  // namespace wanfw_mp4
