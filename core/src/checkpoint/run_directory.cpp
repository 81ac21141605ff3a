#include "checkpoint/run_directory.hpp"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_store.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

/// version_<N> folders of a run (N of at most 9 digits), in order of N, with their N. An entry
/// that cannot be read (a symlink loop) is skipped with a warning.
std::vector<std::pair<long, fs::path>> versions_of(const fs::path& run_root) {
  std::vector<std::pair<long, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(run_root, ec)) return found;
  for (fs::directory_iterator it(run_root, ec), last; !ec && it != last; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string digits = name.rfind("version_", 0) == 0 ? name.substr(8) : "";
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code entry_error;
    if (it->is_directory(entry_error)) found.emplace_back(std::stol(digits), it->path());
    else if (entry_error) spdlog::warn("skipped {}: {}", it->path().string(), entry_error.message());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

fs::path locate_checkpoint(const fs::path& path, const char* flag) {
  if (!fs::exists(path))
    throw FileError(fmt::format("{} {}: no such checkpoint or run folder", flag, path.string()),
                    "pass a run folder or a <run>/checkpoints/step-* folder");
  if (CheckpointStore::is_checkpoint(path)) return path;
  if (auto latest = CheckpointStore(path).latest()) return *latest;
  // <output_dir>/<run.name>: the newest version holding a complete checkpoint, as --resume auto takes.
  const auto versions = versions_of(path);
  for (auto it = versions.rbegin(); it != versions.rend(); ++it)
    if (auto latest = CheckpointStore(it->second).latest()) {
      spdlog::info("{} {}: the newest complete checkpoint of its versions, {}", flag, path.string(), latest->string());
      return *latest;
    }
  throw FileError(fmt::format("{} {}: neither a checkpoint nor a run folder with a complete checkpoint", flag,
                              path.string()),
                  "pass a checkpoint (<run>/version_N/checkpoints/step-*), a run version (<run>/version_N) or the run "
                  "(<output_dir>/<run.name>: its newest version with a checkpoint)");
}

RunDirectory RunDirectory::choose(const RunSettings& run, const std::string& resume) {
  RunDirectory dir;
  const fs::path run_root = run.output_dir / run.name;
  const auto versions = versions_of(run_root);
  if (!resume.empty() && resume != "auto") {
    dir.checkpoint_ = Checkpoint::open(locate_checkpoint(resume, "--resume"));
    dir.path_ = dir.checkpoint_->folder().parent_path().parent_path();
  } else {
    if (resume == "auto")
      for (auto it = versions.rbegin(); it != versions.rend() && !dir.checkpoint_; ++it)
        if (auto latest = CheckpointStore(it->second).latest()) {
          dir.path_ = it->second;
          dir.checkpoint_ = Checkpoint::open(*latest);
        }
    if (!dir.checkpoint_) {
      if (resume == "auto")
        spdlog::info("--resume auto: no checkpoint under {}; starting a new run", run_root.string());
      dir.path_ = run_root / fmt::format("version_{}", versions.empty() ? 0 : versions.back().first + 1);
    }
  }
  return dir;
}

void RunDirectory::create(const std::string& resolved_yaml) const {
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec) throw FileError(fmt::format("{}: cannot create the run folder: {}", path_.string(), ec.message()));
  write_file_atomically(path_ / "config.yaml", resolved_yaml);
}

}  // namespace wanfw
