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
  /// Empty: the strategy the config names is built (`run`, `validate`). Else the commands that
  /// evaluate a checkpoint (`predict`, `sample`, `export`) run as one process with the whole model
  /// on this device (auto, cpu, cuda, cuda:N), whatever layout the config trains on: its strategy
  /// sections are checked, not built.
  std::string one_process_device;
  /// `validate`: a config whose strategy lays out more ranks than this process's job has (network
  /// groups, a sequence-parallel group) started without a launcher is checked as one process on
  /// the CPU, its strategy sections checked, not built.
  bool one_process_unless_launched = false;
};

}  // namespace wanfw
