#include "event_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "events.hpp"
#include "tf_record.hpp"
#include "wanfw/error.hpp"

namespace wanfw::tb {

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// --- the file -----------------------------------------------------------------------------------

EventFile::EventFile(const std::filesystem::path& folder, int flush_every, double flush_seconds)
    : flush_every_(flush_every), flush_seconds_(flush_seconds), last_flush_(std::chrono::steady_clock::now()) {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const auto seconds = static_cast<long long>(wall_time_now());
  path_ = folder / fmt::format("events.out.tfevents.{:010d}.{}.{}.wanfw", seconds, host, static_cast<long>(getpid()));
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw FileError(
        fmt::format("{}: cannot create the TensorBoard event file: {}", path_.string(), std::strerror(errno)));
  write(file_version_event(wall_time_now()));
  flush();
}

EventFile::~EventFile() {
  try {
    flush();
  } catch (const std::exception&) {
    // Reported by the explicit flush on close; a destructor must not throw.
  }
  if (fd_ >= 0) ::close(fd_);
}

void EventFile::write(const std::string& event) {
  pending_ += tf_record(event);
  ++pending_events_;
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_flush_).count();
  if (pending_events_ >= flush_every_ || since >= flush_seconds_) flush();
}

void EventFile::flush() {
  std::size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      pending_.erase(0, done);
      throw FileError(fmt::format("{}: writing TensorBoard events failed: {}", path_.string(), std::strerror(error)),
                      error == ENOSPC ? "the disk is full; free space (checkpoints are written separately)" : "");
    }
    done += static_cast<std::size_t>(n);
  }
  pending_.clear();
  pending_events_ = 0;
  last_flush_ = std::chrono::steady_clock::now();
}

}  // namespace wanfw::tb
