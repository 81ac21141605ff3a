#pragma once
// Internal: the run a config lays out, read without building its plugins: the strategy chain and
// what it declares it does with the model, the ranks, the batch, the largest bucket, the precision.

#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/core_sections.hpp"
#include "plugin_host/plugin_host.hpp"
#include "wanfw/plugin.hpp"

namespace wanfw {

/// The strategy a config's `strategy` section describes, read from the plugins' descriptors: a
/// strategy that wraps another holds it in a subsection (grad_accum's `inner`), and the chain ends
/// at the strategy that places the model.
struct StrategyChain {
  std::vector<std::string> sections;  ///< every link's section, outermost first
  std::string innermost_section;      ///< "strategy", or "strategy.inner" under a wrapper
  std::string innermost_name;         ///< that section's plugin ("ddp")
  StrategyCapabilities capabilities;  ///< what any strategy of the chain declares
  StrategyLayout layout;              ///< the innermost layout a strategy of the chain declares
};

/// The chain of the config's `strategy` section; throws ConfigError when it names no plugin found.
StrategyChain strategy_chain(const Config& config, const PluginHost& host);

/// `--set data.path=...` (or data.name) on a config written for another data set: the data
/// section's options of another data set plugin that no `--set` gave are removed from `config`
/// with a warning, as `--set <section>.name=...` drops a replaced plugin's options, so the data set
/// takes its own. A path given alone to a section naming a data set that reads no folder
/// (synthetic) makes it the folder's data set, as for a section without a name; `settings` follow.
void take_chosen_data_set_options(Config& config, CoreSettings& settings, const PluginHost& host);

/// The dtype `mode` computes in: bf16 for bf16 and bf16_weights, fp16 for fp16, else fp32.
at::ScalarType compute_dtype(PrecisionMode mode);

/// The run `config` describes, on `gpus` ranks: the strategy (a wrapper's inner one) and whether it
/// shards the training state, the sequence-parallel size, the batch, the largest latent bucket
/// (data.buckets) and the precision.
TrainingLayout training_layout(const Config& config, const CoreSettings& settings, const PluginHost& host, int gpus);

/// `layout` as one process holding the whole model on one device lays it out: what a command that
/// evaluates a checkpoint runs, whatever the config trains on.
TrainingLayout one_process_layout(TrainingLayout layout);

}  // namespace wanfw
