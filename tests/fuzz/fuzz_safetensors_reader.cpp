// Fuzz target: a safetensors file as wanfw opens it (predict --inputs, checkpoints, weights).
// The input is the whole file. Opening either succeeds, and then every tensor can be read, or
// fails with wanfw's FileError; anything else (a crash, a sanitizer report, another exception)
// is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include "wanfw/error.hpp"
#include "wanfw/safetensors.hpp"

namespace {

/// One in-memory file, rewritten for every input and opened by its /proc path like any file.
struct MemoryFile {
  int fd = ::memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  std::string path = "/proc/self/fd/" + std::to_string(fd);

  void write(const std::uint8_t* data, std::size_t size) {
    if (fd < 0 || ::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static MemoryFile file;
  file.write(data, size);
  try {
    const wanfw::SafetensorsFile opened = wanfw::SafetensorsFile::open(file.path);
    for (const wanfw::TensorRecord& record : opened.records()) {
      const at::Tensor view = opened.tensor(record.name);
      if (static_cast<std::uint64_t>(view.nbytes()) != record.end - record.begin) std::abort();
      if (view.numel() > 0 && view.numel() <= 4096) (void)view.clone();  // touches every byte it claims
    }
  } catch (const wanfw::FileError&) {
  }
  return 0;
}
