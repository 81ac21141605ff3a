#pragma once
// For fuzz targets that read one file: an in-memory file, rewritten for every input and opened by
// its /proc path like any file on disk.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

struct MemoryFile {
  int fd;
  std::string path;

  explicit MemoryFile(const char* name)
      : fd(::memfd_create(name, MFD_CLOEXEC)), path("/proc/self/fd/" + std::to_string(fd)) {}

  void write(const std::uint8_t* data, std::size_t size) {
    if (fd < 0 || ::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  }
};
