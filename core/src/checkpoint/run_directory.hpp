#pragma once
// Internal: where a run lives. <output_dir>/<name>/version_<N>/ holds one run: its resolved
// config, logs and checkpoints. This is the one place that decides which version a run writes
// to and which checkpoint it resumes from.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "config/core_sections.hpp"

namespace wanfw {

class RunDirectory {
 public:
  /// The folder a run writes to. `resume`: "" starts version_<N+1>; "auto" continues the newest
  /// version with a complete checkpoint (a new version when there is none); anything else is a
  /// checkpoint folder or a run folder, whose newest checkpoint is taken. A pure function of the
  /// file system: every rank computes the same answer before the main one creates the folder.
  static RunDirectory choose(const RunSettings& run, const std::string& resume);

  const std::filesystem::path& path() const { return path_; }
  /// The checkpoint to resume from, opened (its trainer state read and checked), or null.
  const std::shared_ptr<const Checkpoint>& checkpoint() const { return checkpoint_; }
  /// The step the checkpoint was written at (0 for a fresh run).
  std::int64_t resume_step() const { return checkpoint_ ? checkpoint_->state().step : 0; }

  /// Creates the folder and writes the run's resolved config into it (main process only).
  void create(const std::string& resolved_yaml) const;

 private:
  std::filesystem::path path_;
  std::shared_ptr<const Checkpoint> checkpoint_;
};

/// A checkpoint folder as given, or the newest complete checkpoint of a run folder; `flag` names
/// the option that gave the path ("--resume", "--checkpoint") in the FileError.
std::filesystem::path locate_checkpoint(const std::filesystem::path& path, const char* flag);

}  // namespace wanfw
