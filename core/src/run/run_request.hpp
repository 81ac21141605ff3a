#pragma once
// What a command asks of an experiment: its config, the overrides, and where it resumes from.
// `wanfw run`, `validate`, `model-info`, `predict`, `sample` and `export` all start from one.

#include <filesystem>
#include <string>
#include <vector>

namespace wanfw {

struct RunRequest {
  std::filesystem::path config;
  std::vector<std::string> overrides;  ///< "a.b.c=value"
  /// "" starts a new run; "auto" continues from the newest complete checkpoint of the run (or
  /// starts a new one if there is none); anything else is a checkpoint folder or a run folder.
  std::string resume;
};

}  // namespace wanfw
