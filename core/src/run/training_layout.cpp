#include "run/training_layout.hpp"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

namespace wanfw {

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
    if (descriptor.strategy_layout != nullptr) {
      std::vector<std::string> extra_keys = descriptor.subsections;
      extra_keys.push_back("name");
      chain.layout = descriptor.strategy_layout(config.section(section, descriptor.options, extra_keys));
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
  layout.network_groups = chain.layout.network_groups;
  layout.batch_size = settings.data.batch_size;
  layout.dtype = compute_dtype(settings.precision.mode);
  layout.master_weights = settings.precision.mode == PrecisionMode::BF16Weights;
  layout.swapped_blocks = settings.block_swap.blocks;
  layout.swap_ring = settings.block_swap.ring;
  if (config.has("data.buckets"))
    for (std::size_t i = 0; i < config.sequence_size("data.buckets"); ++i) {
      std::string text = config.string_at(fmt::format("data.buckets.{}", i));
      text = text.substr(0, text.find('='));  // "FxHxW=batch"
      std::vector<std::int64_t> sizes;
      for (std::size_t start = 0; start <= text.size();) {
        const std::size_t x = std::min(text.find('x', start), text.size());
        sizes.push_back(std::atoll(text.substr(start, x - start).c_str()));
        start = x + 1;
      }
      const auto volume = [](const std::vector<std::int64_t>& v) { return v.size() == 3 ? v[0] * v[1] * v[2] : 0; };
      if (sizes.size() == 3 && volume(sizes) > volume(layout.latent)) layout.latent = sizes;
    }
  return layout;
}

TrainingLayout one_process_layout(TrainingLayout layout) {
  layout.gpus = 1;
  layout.strategy = "single";
  layout.sharded = false;
  layout.sequence_parallel = 1;
  layout.network_groups.clear();
  return layout;
}

}  // namespace wanfw
