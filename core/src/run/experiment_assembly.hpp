#pragma once
// Internal: an experiment's parts built from its config (core settings, plugins, data sets),
// shared by `wanfw run`, `validate`, `predict`, `sample` and `export`.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/core_sections.hpp"
#include "data/training_data.hpp"
#include "plugin_host/plugin_host.hpp"
#include "run/run_request.hpp"
#include "units/block_swap.hpp"
#include "wanfw/logger.hpp"
#include "wanfw/model.hpp"
#include "wanfw/strategy.hpp"

namespace wanfw {

/// Everything a run is made of, built from the config before any training.
struct Experiment {
  Config config;
  CoreSettings settings;
  std::unique_ptr<PluginHost> host;
  std::shared_ptr<Strategy> strategy;
  std::shared_ptr<Model> model;
  std::vector<std::shared_ptr<Logger>> loggers;  ///< built, not yet opened (LoggerSet opens them)
  std::unique_ptr<TrainingData> data;             ///< without fields when the model was only described
  /// The config with every default and resolved value filled in: computed once, after every
  /// plugin has recorded its options; what config.yaml, the loggers and checkpoints keep.
  std::string resolved_yaml;
  /// Set instead of `model` when the model was described without being built.
  std::optional<std::string> model_summary;
  /// block_swap: the streamed units' host copies and the runtime the model runs its units through
  /// (place_model sets them up).
  std::shared_ptr<BlockSwap> block_swap;
  std::shared_ptr<UnitRuntime> units;
  /// Set when the config's strategy lays out more ranks than the job has and the experiment was
  /// assembled as one process instead (RunRequest::one_process_unless_launched): those ranks.
  int ranks_laid_out = 0;
};

/// The built model placed by the strategy (Strategy::setup) and, with block_swap, its streamed
/// units' frozen weights moved to host memory first and streamed through a UnitRuntime after.
void place_model(Experiment& e);

/// How `assemble` treats the model: build it (training, predict), or have its plugin describe it
/// without allocating weights when the plugin can (validate).
enum class ModelAssembly { Build, DescribeIfPossible };

Experiment assemble(const RunRequest& request, ModelAssembly assembly = ModelAssembly::Build);

/// The model plugin's own summary of the config's model section, worked out without building it;
/// nothing if the plugin cannot describe itself. Records the resolved model options in `config`.
/// `plugin`, when given, receives the plugin that was asked.
std::optional<std::string> describe_model(Config& config, const PluginHost& host, const TrainingLayout& layout,
                                          const PluginInfo** plugin = nullptr);

}  // namespace wanfw
