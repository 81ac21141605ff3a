#pragma once
// One TensorBoard event file of one process, written in TFRecords and flushed whole. The
// messages it holds: events.hpp; their encoding: proto.hpp, tf_record.hpp, png.hpp.

#include <chrono>
#include <filesystem>
#include <string>

namespace wanfw::tb {

/// Seconds since the epoch, with sub-second resolution.
double wall_time_now();

/// One event file of one process: events.out.tfevents.<seconds>.<host>.<pid>.wanfw in `folder`,
/// starting with the file_version event. Records are buffered and written whole, every
/// `flush_every` events or `flush_seconds`, and on flush(); a killed process leaves a file that
/// ends on a record boundary of an earlier flush.
class EventFile {
 public:
  EventFile(const std::filesystem::path& folder, int flush_every, double flush_seconds);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  void write(const std::string& event);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::string pending_;
  int pending_events_ = 0;
  int flush_every_;
  double flush_seconds_;
  std::chrono::steady_clock::time_point last_flush_;
};

}  // namespace wanfw::tb
