#include "media/mp4_file.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <mutex>

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

/// The writer, from the library beside libwanfw_core, opened the first time it is asked for; null
/// (and `problem` says why) where this build has none.
struct OpenedWriter {
  WriteMp4 writer = nullptr;
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
    if (writer == nullptr) problem = fmt::format("{} has no wanfw_write_mp4_v3", library.string());
  });
  return opened;
}

WriteMp4 mp4_writer() {
  const OpenedWriter& opened = opened_writer();
  if (opened.writer == nullptr)
    throw FileError(fmt::format("writing mp4 files: {}", opened.problem),
                    "build the wanfw_mp4_writer target: FFmpeg's libav* development packages "
                    "(scripts/setup.sh), configured with -DWANFW_MP4_WRITER=ON (the default)");
  return opened.writer;
}

}  // namespace

bool mp4_writer_available() { return opened_writer().writer != nullptr; }

Mp4Written write_mp4(const std::filesystem::path& path, const at::Tensor& frames, double fps) {
  if (frames.dim() != 4 || frames.size(3) != 3 || frames.scalar_type() != at::kByte || frames.size(0) < 1)
    throw Error(fmt::format("{}: frames must be [F, H, W, 3] uint8 with F >= 1, got {}", path.string(),
                            c10::str(frames.sizes())));
  if (!(fps > 0)) throw Error(fmt::format("{}: fps must be positive, got {}", path.string(), fps));
  const at::Tensor rgb = frames.to(at::kCPU).contiguous();
  const int height = static_cast<int>(rgb.size(1)), width = static_cast<int>(rgb.size(2));
  char encoder[64] = {}, error[1024] = {}, hint[512] = {}, warnings[4096] = {};
  int stored_height = 0, stored_width = 0;
  const int failed = mp4_writer()(path.c_str(), rgb.data_ptr<std::uint8_t>(), rgb.size(0), height, width, fps, encoder,
                                  sizeof(encoder), &stored_height, &stored_width, error, sizeof(error), hint,
                                  sizeof(hint), warnings, sizeof(warnings));
  // FFmpeg's own warnings and errors, each once, naming the file (its statistics are dropped).
  std::string_view said(warnings);
  for (std::size_t end; (end = said.find('\n')) != std::string_view::npos; said.remove_prefix(end + 1))
    log::warn(fmt::format("{}: FFmpeg: {}", path.string(), said.substr(0, end)));
  if (failed != 0) throw FileError(fmt::format("{}: {}", path.string(), error), hint);
  sync_directory(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path());
  return Mp4Written{encoder, stored_width, stored_height, rgb.size(0)};
}

}  // namespace wanfw
