#include "run/training_layout.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace wanfw {

namespace {

/// Whether `plugin` has the option `key` (a top-level key of its section: "num_samples", or the
/// first part of a nested option's name).
bool declares(const PluginInfo& plugin, const std::string& key) {
  return std::ranges::any_of(plugin.descriptor->options, [&](const OptionSpec& spec) {
    return spec.name == key || spec.name.rfind(key + ".", 0) == 0;
  });
}

}  // namespace

void take_chosen_data_set_options(Config& config, CoreSettings& settings, const PluginHost& host) {
  if (!config.overridden("data.path") && !config.overridden("data.name")) return;
  std::vector<std::string> dropped;
  std::string owner;
  // `--set data.path=...` alone, on a section naming a data set that reads no folder (synthetic):
  // the folder's data set, as for a section without a name.
  if (config.overridden("data.path") && !config.overridden("data.name") && config.has("data.name")) {
    const PluginInfo& named = host.find(PluginKind::Dataset, settings.data.name, config.where("data.name"));
    if (!declares(named, "path")) {
      config.remove("data.name");
      settings = CoreSettings::from(config);
      dropped.push_back("name");
      owner = named.descriptor->name;
    }
  }
  const PluginInfo& chosen = host.find(PluginKind::Dataset, settings.data.name, config.where("data"));
  for (const std::string& key : config.keys_at("data")) {
    const bool core = std::ranges::any_of(core_schemas(), [&](const auto& section) {
      return section.first == "data" &&
             std::ranges::any_of(section.second, [&](const OptionSpec& spec) { return spec.name == key; });
    });
    if (core || key == "path" || declares(chosen, key) || config.overridden("data." + key)) continue;
    for (const PluginInfo& other : host.plugins())
      if (other.descriptor->kind == PluginKind::Dataset && declares(other, key)) {
        dropped.push_back(key);
        owner = other.descriptor->name;
        break;
      }
  }
  for (const std::string& key : dropped) config.remove("data." + key);
  if (!dropped.empty())
    spdlog::warn("the override makes the data set {}: data.{} belonged to the {} data set of {} and {} dropped",
                 chosen.descriptor->name, fmt::join(dropped, ", data."), owner, config.source_name(),
                 dropped.size() == 1 ? "was" : "were");
}

StrategyChain strategy_chain(const Config& config, const PluginHost& host) {
  StrategyChain chain;
  std::string section = "strategy";
  while (config.has(section + ".name")) {
    const std::string name = config.string_at(section + ".name");
    const PluginDescriptor& descriptor = *host.find(PluginKind::Strategy, name, config.where(section + ".name")).descriptor;
    chain.sections.push_back(section);
    chain.innermost_section = section;
    chain.innermost_name = name;
    chain.capabilities.shards_state |= descriptor.capabilities.shards_state;
    chain.capabilities.replicates_module |= descriptor.capabilities.replicates_module;
    chain.capabilities.places_networks |= descriptor.capabilities.places_networks;
    chain.capabilities.host_state |= descriptor.capabilities.host_state;
    chain.capabilities.unit_gradients_final =
        (chain.sections.size() == 1 || chain.capabilities.unit_gradients_final) &&
        descriptor.capabilities.unit_gradients_final;
    if (descriptor.strategy_layout != nullptr) {
      std::vector<std::string> extra_keys = descriptor.subsections;
      extra_keys.push_back("name");
      const int accumulated = chain.layout.accumulation;  // the wrappers' so far
      chain.layout = descriptor.strategy_layout(config.section(section, descriptor.options, extra_keys));
      chain.layout.accumulation *= accumulated;
    }
    const auto wrapped = std::find_if(descriptor.subsections.begin(), descriptor.subsections.end(),
                                      [&](const std::string& key) { return config.has(section + "." + key + ".name"); });
    if (wrapped == descriptor.subsections.end()) break;
    section += "." + *wrapped;
  }
  return chain;
}

at::ScalarType compute_dtype(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::BF16:
    case PrecisionMode::BF16Weights: return at::kBFloat16;
    case PrecisionMode::FP16: return at::kHalf;
    case PrecisionMode::FP32: break;
  }
  return at::kFloat;
}

TrainingLayout training_layout(const Config& config, const CoreSettings& settings, const PluginHost& host, int gpus) {
  TrainingLayout layout;
  layout.gpus = gpus;
  const StrategyChain chain = strategy_chain(config, host);
  if (!chain.innermost_name.empty()) layout.strategy = chain.innermost_name;
  layout.sharded = chain.capabilities.shards_state;
  layout.sequence_parallel = chain.layout.sequence_parallel;
  layout.replica_groups = chain.layout.replica_groups;
  layout.network_groups = chain.layout.network_groups;
  layout.batch_size = settings.data.batch_size;
  layout.dtype = compute_dtype(settings.precision.mode);
  layout.master_weights = settings.precision.mode == PrecisionMode::BF16Weights;
  layout.host_optimizer_state = settings.optimizer.state == OptimizerStateHome::Host;
  layout.unit_gradients_final = chain.capabilities.unit_gradients_final;
  layout.accumulation = chain.layout.accumulation;
  layout.swapped_blocks = settings.block_swap.blocks;
  layout.swap_ring = settings.block_swap.ring;
  // The largest sample the data set declares (its plugin's data_buckets, never its keys).
  std::int64_t largest = 0;
  for (const Bucket& b : host.data_buckets(config, "data", settings.data.name, core_option_names("data")))
    if (b.frames * b.height * b.width > largest) {
      largest = b.frames * b.height * b.width;
      layout.latent = {b.frames, b.height, b.width};
    }
  return layout;
}

TrainingLayout one_process_layout(TrainingLayout layout) {
  layout.gpus = 1;
  layout.strategy = "single";
  layout.sharded = false;
  layout.sequence_parallel = 1;
  layout.replica_groups = 1;
  layout.network_groups.clear();
  return layout;
}

}  // namespace wanfw
