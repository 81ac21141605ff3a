// Building plugins from config sections: a section checked against its plugin's schema (removed
// options, unknown keys, types), recorded in the resolved config, and handed to the plugin's
// factory with its context; what a plugin declares from its options alone (a data set's buckets).
#include <algorithm>
#include <type_traits>

#include <fmt/format.h>

#include "config/config.hpp"
#include "plugin_host/plugin_host.hpp"

namespace wanfw {

void refuse_removed_options(const Config& config, const std::string& section, const PluginInfo& plugin) {
  for (const auto& key : config.keys_at(section))
    for (const auto& [removed, replacement] : plugin.descriptor->removed_options)
      if (key == removed)
        throw ConfigError(config.where(section + "." + key),
                          fmt::format("'{}' is no longer an option of the {} plugin '{}'", key,
                                      plugin_kind_name(plugin.descriptor->kind), plugin.descriptor->name),
                          replacement);
}

namespace {

/// `section` checked against `plugin`'s schema (removed options, unknown keys, types), defaults in.
Options checked_options(const Config& config, const std::string& section, const PluginInfo& plugin,
                        std::vector<std::string> extra_keys) {
  refuse_removed_options(config, section, plugin);
  extra_keys.push_back("name");
  extra_keys.insert(extra_keys.end(), plugin.descriptor->subsections.begin(), plugin.descriptor->subsections.end());
  return config.section(section, plugin.descriptor->options, extra_keys);
}

template <typename Object, typename Factory>
std::shared_ptr<Object> build(const PluginHost& host, Config& config, const std::string& section, PluginKind kind,
                              const PluginContext& context, Factory PluginDescriptor::*factory,
                              const std::string& name, std::vector<std::string> extra_keys, bool may_be_null = false) {
  const PluginInfo& info = host.find(kind, name, config.where(section + ".name"));
  const auto& subsections = info.descriptor->subsections;
  const Options options = checked_options(config, section, info, std::move(extra_keys));
  config.record_resolved(options, name);
  PluginContext ctx = context;
  ctx.section = section;
  bool wraps_sharding = false;  // a strategy this one builds (a wrapper's inner one) shards the state
  bool wraps_final = true;      // and every one it builds leaves a unit's gradients final
  // Valid while the factory runs: it refers to the host and the config being assembled.
  ctx.build_strategy = [&host, &config, &context, &wraps_sharding, &wraps_final, section, name,
                        subsections](const std::string& key) {
    const std::string path = section + "." + key;
    if (std::find(subsections.begin(), subsections.end(), key) == subsections.end())
      throw PluginError(fmt::format("the {} plugin '{}' asked to build '{}', which its descriptor does not list in "
                                    "subsections",
                                    plugin_kind_name(PluginKind::Strategy), name, path),
                        "add the key to PluginDescriptor::subsections");
    if (!config.has(path))
      throw ConfigError(config.where(section), fmt::format("'{}' is missing: the plugin '{}' builds a strategy from it",
                                                           path, name),
                        fmt::format("add for example `{}: {{name: single}}` to '{}'", key, section));
    std::shared_ptr<Strategy> inner = host.make_strategy(config, path, context);
    wraps_sharding = wraps_sharding || inner->shards_state();
    wraps_final = wraps_final && inner->unit_gradients_final();
    return inner;
  };
  std::unique_ptr<Object> object = (info.descriptor->*factory)(options, ctx);
  if (!object && may_be_null) return nullptr;
  if (!object)
    throw PluginError(fmt::format("{}: the {} plugin '{}' returned no object", info.path.string(),
                                  plugin_kind_name(kind), name));
  // A strategy's sharding is what its descriptor (or a strategy it wraps) declares: said once.
  if constexpr (std::is_same_v<Object, Strategy>) {
    object->set_shards_state(info.descriptor->capabilities.shards_state || wraps_sharding);
    object->set_unit_gradients_final(info.descriptor->capabilities.unit_gradients_final && wraps_final);
  }
  return std::shared_ptr<Object>(std::move(object));
}

}  // namespace

void PluginHost::check_section(const Config& config, const std::string& section, PluginKind kind) const {
  (void)checked_options(config, section, find(kind, config.string_at(section + ".name"), config.where(section)), {});
}

std::vector<Bucket> PluginHost::data_buckets(const Config& config, const std::string& section, const std::string& name,
                                             const std::vector<std::string>& core_keys) const {
  const PluginInfo& info = find(PluginKind::Dataset, name, config.where(section));
  if (info.descriptor->data_buckets == nullptr) return {};
  return info.descriptor->data_buckets(checked_options(config, section, info, core_keys));
}

std::shared_ptr<Model> PluginHost::make_model(Config& config, const std::string& section,
                                              const PluginContext& context) const {
  return build<Model>(*this, config, section, PluginKind::Model, context, &PluginDescriptor::make_model,
                       config.string_at(section + ".name"), {});
}
std::shared_ptr<Strategy> PluginHost::make_strategy(Config& config, const std::string& section,
                                                    const PluginContext& context) const {
  return build<Strategy>(*this, config, section, PluginKind::Strategy, context, &PluginDescriptor::make_strategy,
                       config.string_at(section + ".name"), {});
}
std::shared_ptr<Logger> PluginHost::make_logger(Config& config, const std::string& section,
                                                const PluginContext& context) const {
  return build<Logger>(*this, config, section, PluginKind::Logger, context, &PluginDescriptor::make_logger,
                       config.string_at(section + ".name"), {});
}

std::shared_ptr<VideoDecoder> PluginHost::make_decoder(Config& config, const std::string& section,
                                                       const PluginContext& context) const {
  const std::string name = config.string_at(section + ".name");
  const PluginInfo& info = find(PluginKind::Model, name, config.where(section + ".name"));
  if (info.descriptor->make_decoder == nullptr) return nullptr;
  return build<VideoDecoder>(*this, config, section, PluginKind::Model, context, &PluginDescriptor::make_decoder, name,
                             {}, /*may_be_null=*/true);
}

std::shared_ptr<Dataset> PluginHost::make_dataset(Config& config, const std::string& section, const std::string& name,
                                                  const std::vector<std::string>& core_keys,
                                                  const PluginContext& context) const {
  return build<Dataset>(*this, config, section, PluginKind::Dataset, context, &PluginDescriptor::make_dataset, name,
                        core_keys);
}

}  // namespace wanfw
