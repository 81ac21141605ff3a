// libwanfw_mp4_writer's C functions: wanfw_write_mp4_v3 writes a whole video (to a temporary file
// renamed into place), and wanfw_mp4_open_v1 / append_v1 / close_v1 write one as its frames come
// (fragmented, so players read it as it grows). RGB frames in, H.264 (libx264) or MPEG-4 part 2
// out (mp4_encoder.hpp); FFmpeg's warnings and errors handed back to the caller
// (ffmpeg_messages.hpp), its statistics dropped.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "ffmpeg_messages.hpp"
#include "mp4_encoder.hpp"

namespace {

using wanfw_mp4::Encoder;
using wanfw_mp4::even;
using wanfw_mp4::Failure;

void write(const char* path, const std::uint8_t* rgb, std::int64_t frames, int height, int width, double fps,
           std::string& encoder_name) {
  const std::string temp = std::string(path) + ".tmp-" + std::to_string(::getpid()) + ".mp4";
  struct RemoveTemp {  // a failure leaves no temporary file behind
    const std::string& name;
    ~RemoveTemp() { std::remove(name.c_str()); }
  } remove_temp{temp};
  Encoder encoder(temp, height, width, fps, /*fragmented=*/false);
  encoder_name = encoder.name();
  encoder.append(rgb, frames);
  encoder.finish();
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error) throw Failure("renaming " + temp + " into place failed: " + error.message());
}

void copy_out(const std::string& text, char* out, std::size_t size) {
  if (out == nullptr || size == 0) return;
  std::snprintf(out, size, "%s", text.c_str());
}

}  // namespace

/// Writes `frames` RGB frames (height x width x 3 bytes each, back to back) to `path` as an mp4
/// playing at `fps`. Returns 0, the encoder's name in `encoder` and the size the stream stores
/// (odd sizes grow by one: yuv420p halves chroma) in `stored_height` x `stored_width`; or 1 with
/// what failed in `error` and what to do in `hint`. Either way `warnings` holds FFmpeg's warnings
/// and errors while it wrote, each once, one a line ("" for none).
extern "C" __attribute__((visibility("default"))) int wanfw_write_mp4_v3(
    const char* path, const std::uint8_t* rgb, std::int64_t frames, int height, int width, double fps, char* encoder,
    std::size_t encoder_size, int* stored_height, int* stored_width, char* error, std::size_t error_size, char* hint,
    std::size_t hint_size, char* warnings, std::size_t warnings_size) {
  const wanfw_mp4::FfmpegMessages messages;
  struct Report {  // the messages reach the caller whatever happens below
    const wanfw_mp4::FfmpegMessages& messages;
    char* out;
    std::size_t size;
    ~Report() { copy_out(messages.text(), out, size); }
  } report{messages, warnings, warnings_size};
  try {
    std::string name;
    write(path, rgb, frames, height, width, fps, name);
    copy_out(name, encoder, encoder_size);
    *stored_height = even(height);
    *stored_width = even(width);
    return 0;
  } catch (const Failure& failure) {
    copy_out(failure.what(), error, error_size);
    copy_out(failure.hint, hint, hint_size);
  } catch (const std::exception& e) {
    copy_out(e.what(), error, error_size);
    copy_out("", hint, hint_size);
  }
  return 1;
}

namespace {

/// What a C call hands back: FFmpeg's messages while it ran, and on a failure what and the hint.
struct Outcome {
  char *error, *hint, *warnings;
  std::size_t error_size, hint_size, warnings_size;
};

/// Runs `work`, reporting into `out`: 0, or 1 with the failure.
template <typename Work>
int reported(const Outcome& out, const Work& work) {
  const wanfw_mp4::FfmpegMessages messages;
  int failed = 1;
  try {
    work();
    failed = 0;
  } catch (const Failure& failure) {
    copy_out(failure.what(), out.error, out.error_size);
    copy_out(failure.hint, out.hint, out.hint_size);
  } catch (const std::exception& e) {
    copy_out(e.what(), out.error, out.error_size);
    copy_out("", out.hint, out.hint_size);
  }
  copy_out(messages.text(), out.warnings, out.warnings_size);
  return failed;
}

}  // namespace

/// Starts an mp4 at `path` (written there as it goes: fragmented, its header first) for frames of
/// height x width at `fps`. Returns the stream (the encoder's name in `encoder`), or null with
/// what failed in `error` and what to do in `hint`; `warnings` as wanfw_write_mp4_v3's.
extern "C" __attribute__((visibility("default"))) void* wanfw_mp4_open_v1(
    const char* path, int height, int width, double fps, char* encoder, std::size_t encoder_size, char* error,
    std::size_t error_size, char* hint, std::size_t hint_size, char* warnings, std::size_t warnings_size) {
  Encoder* opened = nullptr;
  reported({error, hint, warnings, error_size, hint_size, warnings_size}, [&] {
    opened = new Encoder(path, height, width, fps, /*fragmented=*/true);
    copy_out(opened->name(), encoder, encoder_size);
  });
  return opened;
}

/// Appends `frames` RGB frames (height x width x 3 bytes each) to the stream; 0, or 1 with the
/// failure. What the encoder has let go is in the file when it returns.
extern "C" __attribute__((visibility("default"))) int wanfw_mp4_append_v1(
    void* stream, const std::uint8_t* rgb, std::int64_t frames, char* error, std::size_t error_size, char* hint,
    std::size_t hint_size, char* warnings, std::size_t warnings_size) {
  return reported({error, hint, warnings, error_size, hint_size, warnings_size},
                  [&] { static_cast<Encoder*>(stream)->append(rgb, frames); });
}

/// Finishes the stream's file (the encoder's last frames, the trailer) and frees the stream, also
/// when finishing fails; 0, or 1 with the failure.
extern "C" __attribute__((visibility("default"))) int wanfw_mp4_close_v1(void* stream, char* error,
                                                                         std::size_t error_size, char* hint,
                                                                         std::size_t hint_size, char* warnings,
                                                                         std::size_t warnings_size) {
  auto* encoder = static_cast<Encoder*>(stream);
  const int failed =
      reported({error, hint, warnings, error_size, hint_size, warnings_size}, [&] { encoder->finish(); });
  delete encoder;
  return failed;
}
