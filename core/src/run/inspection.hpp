#pragma once
// Looking at an experiment without training it: `wanfw validate`, `model-info` and the plugin
// folders a config names.

#include <filesystem>
#include <string>
#include <vector>

#include "run/run_request.hpp"

namespace wanfw {

/// Everything `run_experiment` does before training: config, plugins, data set. A model whose
/// plugin can describe itself (inspect_model) is checked without allocating its weights.
/// Returns a human-readable summary.
std::string validate_experiment(const RunRequest& request);

/// What `wanfw model-info` asks besides the config: the ranks the run starts on, and the device and
/// host bytes per rank a memory plan must fit (0: none asked).
struct InspectRequest {
  int gpus = 1;
  double fit_device_bytes = 0;
  double fit_host_bytes = 0;
};

/// The model plugin's summary of the config's model, worked out without allocating weights, with
/// its memory per GPU for the config's run as `inspect` says.
std::string inspect_model(const RunRequest& request, const InspectRequest& inspect = {});

/// The plugin folders a config's plugin_path names (absolute), for `wanfw plugins CONFIG`.
std::vector<std::filesystem::path> config_plugin_path(const std::filesystem::path& config);

}  // namespace wanfw
