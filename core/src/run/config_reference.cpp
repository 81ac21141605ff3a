#include "run/config_reference.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/core_sections.hpp"
#include "plugin_host/plugin_host.hpp"

namespace wanfw {

namespace {

/// One row an option; an entry list's entry options follow it as `list[].key`.
void rows(const OptionSchema& schema, const std::string& prefix, std::string& out) {
  for (const auto& o : schema) {
    std::string type = option_type_name(o.type);
    if (o.type == OptionType::Choice) type = fmt::format("one of {}", fmt::join(o.choices, ", "));
    const std::string def = o.required ? "required" : o.default_yaml.empty() ? "—" : "`" + o.default_yaml + "`";
    out += fmt::format("| `{}{}` | {} | {} | {} |\n", prefix, o.name, type, def, o.doc);
    if (o.type == OptionType::EntryList) rows(o.entries, prefix + o.name + "[].", out);
  }
}

std::string table(const OptionSchema& schema) {
  if (schema.empty()) return "No options.\n";
  std::string out = "| option | type | default | meaning |\n|---|---|---|---|\n";
  rows(schema, "", out);
  return out;
}

}  // namespace

std::string configuration_reference(const PluginHost& host) {
  std::string out = "## Core sections\n";
  for (const auto& [section, schema] : core_schemas()) out += fmt::format("\n### `{}`\n\n{}", section, table(schema));
  out += "\n### `plugin_path`\n\nA list of folders searched for plugins before `$WANFW_PLUGIN_PATH` and the "
         "install's plugin folder; relative paths are relative to the config file.\n";
  for (PluginKind kind : {PluginKind::Model, PluginKind::Strategy, PluginKind::Logger, PluginKind::Dataset}) {
    const char* section = kind == PluginKind::Model      ? "model"
                          : kind == PluginKind::Strategy ? "strategy"
                          : kind == PluginKind::Logger   ? "loggers[]"
                                                         : "data";
    out += fmt::format("\n## {} plugins (`{}` section, chosen by `name:`)\n", plugin_kind_name(kind), section);
    if (kind == PluginKind::Dataset)
      out += "\nTheir options sit in the `data` section beside the core's; `name` defaults to latent_shards when "
             "`path` is set, else synthetic.\n";
    for (const auto& plugin : host.plugins()) {
      const PluginDescriptor& d = *plugin.descriptor;
      if (d.kind != kind) continue;
      out += fmt::format("\n### `{}` ({})\n\n{}\n\n{}", d.name, d.version, d.summary, table(d.options));
      for (const auto& sub : d.subsections)
        out += fmt::format("\n`{}:` a section of its own, naming another {} plugin and its options.\n", sub,
                           plugin_kind_name(kind));
    }
  }
  return out;
}

}  // namespace wanfw
