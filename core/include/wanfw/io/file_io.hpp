#pragma once
// Durable file writes (for the core and plugins). A file written here either appears whole under its final name
// or not at all; failures (a full disk, a read-only folder) raise FileError naming the file.

#include <filesystem>
#include <string>
#include <string_view>

namespace wanfw {

class AtomicFileWriter {
 public:
  /// Opens `<path>.tmp-<pid>` next to `path`.
  explicit AtomicFileWriter(std::filesystem::path path);
  /// Removes the temporary file unless `commit` ran.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// fsync, rename into place, fsync the folder.
  void commit();

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_;
  int fd_ = -1;
};

/// Writes `text` to `path` atomically.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);
/// fsyncs a folder so that renames inside it are durable.
void sync_directory(const std::filesystem::path& folder);
/// " (12.5 MiB free on /runs)": the room left in the folder that holds `path`; empty if unknown.
std::string free_space_note(const std::filesystem::path& path);

}  // namespace wanfw
