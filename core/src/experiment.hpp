#pragma once
// Running an experiment end to end: what `wanfw run` and `wanfw validate` do.

#include <cstdint>
#include <filesystem>
#include <optional>
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

struct RunOutcome {
  std::filesystem::path run_dir;
  std::int64_t final_step = 0;
  int stop_signal = 0;  ///< the signal that interrupted the run, 0 when it ran to the end
  std::optional<std::filesystem::path> last_checkpoint;
};

/// Trains. Throws ConfigError / PluginError for bad set-up (before any compute), FileError for
/// unreadable checkpoints, NonFiniteError when the NaN guard trips.
RunOutcome run_experiment(const RunRequest& request);

/// Everything `run_experiment` does before training: config, plugins, data set. A model whose
/// plugin can describe itself (inspect_model) is checked without allocating its weights.
/// Returns a human-readable summary.
std::string validate_experiment(const RunRequest& request);

}  // namespace wanfw

namespace wanfw {
/// What `wanfw predict` and `wanfw sample` evaluate, and where the results go.
struct EvaluateRequest {
  RunRequest run;
  std::filesystem::path inputs;   ///< safetensors of named input tensors ("" for sample: see below)
  std::filesystem::path outputs;  ///< safetensors the results are written to
  /// A checkpoint folder, or a run folder (its newest checkpoint), whose weights replace the
  /// config's; "" keeps the config's.
  std::filesystem::path checkpoint;
  std::optional<std::uint64_t> seed;  ///< sample: the noise seed (default run.seed)
  std::int64_t count = 1;             ///< sample without inputs: how many data-set samples condition it
  std::int64_t max_shard_bytes = 5'000'000'000;  ///< export: the largest weight file
  bool merge_adapters = false;                   ///< export --merge: adapters folded into full weights
};

/// Builds the experiment's model (with its weights) on the strategy's device, runs it once
/// without gradients on the tensors of `inputs`, and writes its outputs to `outputs`.
void predict_experiment(const EvaluateRequest& request);

/// Builds the model like predict_experiment and draws samples (Model::sample). The conditioning
/// comes from `inputs`, or, without it, from the first `count` samples of the config's data set.
void sample_experiment(const EvaluateRequest& request);

/// Builds the model like predict_experiment and writes its weights in the model family's
/// release layout (Model::export_weights) to `request.outputs`, a folder.
void export_experiment(const EvaluateRequest& request);

/// The model plugin's summary of the config's model, worked out without allocating weights.
std::string inspect_model(const RunRequest& request);

/// The plugin folders a config's plugin_path names (absolute), for `wanfw plugins CONFIG`.
std::vector<std::filesystem::path> config_plugin_path(const std::filesystem::path& config);

class PluginHost;
/// Markdown reference of every core config section and every plugin `host` found, generated
/// from the same schemas the config is validated against (docs/configuration.md embeds it).
std::string configuration_reference(const PluginHost& host);
}  // namespace wanfw
