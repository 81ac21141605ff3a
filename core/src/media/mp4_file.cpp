#include "media/mp4_file.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <mutex>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"
#include "wanfw/log.hpp"

namespace wanfw {

namespace {

/// libwanfw_mp4_writer's one function (core/mp4_writer). Its name carries its version: a writer
/// left from another build is refused by name rather than called with the wrong arguments.
using WriteMp4 = int (*)(const char* path, const std::uint8_t* rgb, std::int64_t frames, int height, int width,
                         double fps, char* encoder, std::size_t encoder_size, int* stored_height, int* stored_width,
                         char* error, std::size_t error_size, char* hint, std::size_t hint_size, char* warnings,
                         std::size_t warnings_size);

/// Its functions that write an mp4 as the frames come (wanfw_mp4_open_v1, append_v1, close_v1).
using OpenMp4 = void* (*)(const char* path, int height, int width, double fps, char* encoder, std::size_t encoder_size,
                          char* error, std::size_t error_size, char* hint, std::size_t hint_size, char* warnings,
                          std::size_t warnings_size);
using AppendMp4 = int (*)(void* stream, const std::uint8_t* rgb, std::int64_t frames, char* error,
                          std::size_t error_size, char* hint, std::size_t hint_size, char* warnings,
                          std::size_t warnings_size);
using CloseMp4 = int (*)(void* stream, char* error, std::size_t error_size, char* hint, std::size_t hint_size,
                         char* warnings, std::size_t warnings_size);

/// The writer, from the library beside libwanfw_core, opened the first time it is asked for; null
/// (and `problem` says why) where this build has none.
struct OpenedWriter {
  WriteMp4 writer = nullptr;
  OpenMp4 open = nullptr;
  AppendMp4 append = nullptr;
  CloseMp4 close = nullptr;
  std::string problem;
};

const OpenedWriter& opened_writer() {
  static std::once_flag once;
  static OpenedWriter opened;
  std::call_once(once, [] {
    WriteMp4& writer = opened.writer;
    std::string& problem = opened.problem;
    Dl_info self{};
    if (dladdr(reinterpret_cast<const void*>(&opened_writer), &self) == 0 || self.dli_fname == nullptr) {
      problem = "cannot tell where libwanfw_core is";
      return;
    }
    const std::filesystem::path library =
        std::filesystem::path(self.dli_fname).parent_path() / "libwanfw_mp4_writer.so";
    void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      problem = fmt::format("cannot open {}: {}", library.string(), ::dlerror());
      return;
    }
    writer = reinterpret_cast<WriteMp4>(::dlsym(handle, "wanfw_write_mp4_v3"));
    opened.open = reinterpret_cast<OpenMp4>(::dlsym(handle, "wanfw_mp4_open_v1"));
    opened.append = reinterpret_cast<AppendMp4>(::dlsym(handle, "wanfw_mp4_append_v1"));
    opened.close = reinterpret_cast<CloseMp4>(::dlsym(handle, "wanfw_mp4_close_v1"));
    if (writer == nullptr || opened.open == nullptr || opened.append == nullptr || opened.close == nullptr) {
      problem = fmt::format("{} lacks wanfw_write_mp4_v3 or wanfw_mp4_open_v1 / append_v1 / close_v1 (a writer "
                            "from another build)",
                            library.string());
      writer = nullptr;
    }
  });
  return opened;
}

const OpenedWriter& mp4_writers() {
  const OpenedWriter& opened = opened_writer();
  if (opened.writer == nullptr)
    throw FileError(fmt::format("writing mp4 files: {}", opened.problem),
                    "build the wanfw_mp4_writer target: FFmpeg's libav* development packages "
                    "(scripts/setup.sh), configured with -DWANFW_MP4_WRITER=ON (the default)");
  return opened;
}

/// FFmpeg's own warnings and errors, each once, naming the file (its statistics are dropped).
void log_warnings(const std::filesystem::path& path, std::string_view said) {
  for (std::size_t end; (end = said.find('\n')) != std::string_view::npos; said.remove_prefix(end + 1))
    log::warn(fmt::format("{}: FFmpeg: {}", path.string(), said.substr(0, end)));
}

/// Frames [F, H, W, 3] uint8 on the CPU, contiguous; refused naming `path` otherwise.
at::Tensor rgb_frames(const std::filesystem::path& path, const at::Tensor& frames) {
  if (frames.dim() != 4 || frames.size(3) != 3 || frames.scalar_type() != at::kByte || frames.size(0) < 1)
    throw Error(fmt::format("{}: frames must be [F, H, W, 3] uint8 with F >= 1, got {}", path.string(),
                            c10::str(frames.sizes())));
  return frames.to(at::kCPU).contiguous();
}

}  // namespace

bool mp4_writer_available() { return opened_writer().writer != nullptr; }

Mp4Written write_mp4(const std::filesystem::path& path, const at::Tensor& frames, double fps) {
  if (!(fps > 0)) throw Error(fmt::format("{}: fps must be positive, got {}", path.string(), fps));
  const at::Tensor rgb = rgb_frames(path, frames);
  const int height = static_cast<int>(rgb.size(1)), width = static_cast<int>(rgb.size(2));
  char encoder[64] = {}, error[1024] = {}, hint[512] = {}, warnings[4096] = {};
  int stored_height = 0, stored_width = 0;
  const int failed = mp4_writers().writer(path.c_str(), rgb.data_ptr<std::uint8_t>(), rgb.size(0), height, width, fps,
                                          encoder, sizeof(encoder), &stored_height, &stored_width, error,
                                          sizeof(error), hint, sizeof(hint), warnings, sizeof(warnings));
  log_warnings(path, warnings);
  if (failed != 0) throw FileError(fmt::format("{}: {}", path.string(), error), hint);
  sync_directory(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path());
  return Mp4Written{encoder, stored_width, stored_height, rgb.size(0)};
}

Mp4Stream::Mp4Stream(std::filesystem::path path, double fps) : path_(std::move(path)), fps_(fps) {
  if (!(fps > 0)) throw Error(fmt::format("{}: fps must be positive, got {}", path_.string(), fps));
  (void)mp4_writers();  // refused now where this build writes no mp4
}

Mp4Stream::~Mp4Stream() {
  if (stream_ == nullptr) return;
  try {
    (void)finish();
  } catch (const std::exception& e) {
    log::warn(fmt::format("{}: {}", path_.string(), e.what()));
  }
}

void Mp4Stream::append(const at::Tensor& frames) {
  const at::Tensor rgb = rgb_frames(path_, frames);
  const int height = static_cast<int>(rgb.size(1)), width = static_cast<int>(rgb.size(2));
  char error[1024] = {}, hint[512] = {}, warnings[4096] = {};
  if (stream_ == nullptr) {  // the first frames give the size
    char encoder[64] = {};
    stream_ = mp4_writers().open(path_.c_str(), height, width, fps_, encoder, sizeof(encoder), error, sizeof(error),
                                 hint, sizeof(hint), warnings, sizeof(warnings));
    log_warnings(path_, warnings);
    if (stream_ == nullptr) throw FileError(fmt::format("{}: {}", path_.string(), error), hint);
    written_ = {encoder, width + width % 2, height + height % 2, 0};
  } else if (written_.width != width + width % 2 || written_.height != height + height % 2) {
    throw Error(fmt::format("{}: frames of {}x{} after frames of {}x{}", path_.string(), width, height,
                            written_.width, written_.height));
  }
  warnings[0] = '\0';
  const int failed = mp4_writers().append(stream_, rgb.data_ptr<std::uint8_t>(), rgb.size(0), error, sizeof(error),
                                          hint, sizeof(hint), warnings, sizeof(warnings));
  log_warnings(path_, warnings);
  if (failed != 0) throw FileError(fmt::format("{}: {}", path_.string(), error), hint);
  written_.frames += rgb.size(0);
}

Mp4Written Mp4Stream::finish() {
  if (stream_ == nullptr) throw Error(fmt::format("{}: no frames were written", path_.string()));
  char error[1024] = {}, hint[512] = {}, warnings[4096] = {};
  void* stream = std::exchange(stream_, nullptr);  // freed by close, whatever it says
  const int failed =
      mp4_writers().close(stream, error, sizeof(error), hint, sizeof(hint), warnings, sizeof(warnings));
  log_warnings(path_, warnings);
  if (failed != 0) throw FileError(fmt::format("{}: {}", path_.string(), error), hint);
  sync_directory(path_.parent_path().empty() ? std::filesystem::path(".") : path_.parent_path());
  return written_;
}

}  // namespace wanfw
