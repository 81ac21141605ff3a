#include "wanfw/io/file_io.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wanfw {

namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* action, int error) {
  const bool full = error == ENOSPC || error == EDQUOT || error == EFBIG;
  throw FileError(fmt::format("{}: cannot {}: {}{}", path.string(), action, std::strerror(error),
                              full ? free_space_note(path) : ""),
                  error == ENOSPC   ? "the disk is full; free space and resume with --resume auto"
                  : error == EDQUOT ? "the disk quota is used up; free space and resume with --resume auto"
                  : error == EFBIG  ? "the file outgrew the largest this process may write (ulimit -f); raise the "
                                      "limit and resume with --resume auto"
                                    : "check the folder exists and is writable");
}

}  // namespace

std::string free_space_note(const std::filesystem::path& path) {
  const std::filesystem::path folder = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(folder, ec);
  if (ec) return "";
  return fmt::format(" ({:.1f} MiB free on {})", static_cast<double>(space.available) / (1024.0 * 1024.0),
                     folder.string());
}

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)) {
  temp_ = path_;
  temp_ += fmt::format(".tmp-{}", ::getpid());
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path_, "create", errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

void AtomicFileWriter::write(const void* data, std::size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, bytes, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path_, "write", errno);
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) fail(path_, "flush", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(temp_.c_str());
    fail(path_, "close", errno);
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp_.c_str());
    fail(path_, "rename into place", error);
  }
  sync_directory(path_.parent_path().empty() ? "." : path_.parent_path());
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  AtomicFileWriter writer(path);
  writer.write(text);
  writer.commit();
}

void sync_directory(const std::filesystem::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some file systems do not allow opening folders
  ::fsync(fd);
  ::close(fd);
}

}  // namespace wanfw
