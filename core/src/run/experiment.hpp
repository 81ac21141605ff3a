#pragma once
// Running an experiment end to end: what `wanfw run` does.

#include <cstdint>
#include <filesystem>
#include <optional>

#include "run/run_request.hpp"

namespace wanfw {

struct RunOutcome {
  std::filesystem::path run_dir;
  std::int64_t final_step = 0;
  int stop_signal = 0;  ///< the signal that interrupted the run, 0 when it ran to the end
  std::optional<std::filesystem::path> last_checkpoint;
};

/// Trains. Throws ConfigError / PluginError for bad set-up (before any compute), FileError for
/// unreadable checkpoints, NonFiniteError when the NaN guard trips.
RunOutcome run_experiment(const RunRequest& request);

}  // namespace wanfw
