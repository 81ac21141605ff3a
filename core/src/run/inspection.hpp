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

/// The model plugin's summary of the config's model, worked out without allocating weights, with
/// its memory per GPU for the config's run started on `gpus` ranks.
std::string inspect_model(const RunRequest& request, int gpus = 1);

/// The plugin folders a config's plugin_path names (absolute), for `wanfw plugins CONFIG`.
std::vector<std::filesystem::path> config_plugin_path(const std::filesystem::path& config);

}  // namespace wanfw
