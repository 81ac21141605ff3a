// Fuzz target: an experiment config with `--set` overrides, read as `wanfw validate` reads it.
// The input is the YAML text, then each override after a NUL byte ("yaml\0a.b=1\0c=x"). Reading
// either succeeds or fails with wanfw's ConfigError; anything else is a finding.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "config/core_sections.hpp"
#include "fuzz_target.hpp"
#include "wanfw/error.hpp"
#include "wanfw/options.hpp"

namespace {

using wanfw::option;
using T = wanfw::OptionType;

/// A plugin schema with one option of every type, standing in for a model's or strategy's, and
/// nested options ("adapter.rank": a mapping inside the section) with an entry list in them.
const wanfw::OptionSchema& plugin_schema() {
  static const wanfw::OptionSchema schema = {
      option("count", T::Integer).value("3"),
      option("rate", T::Number).value("1e-4"),
      option("flag", T::Boolean).value("false"),
      option("label", T::String).value("\"\""),
      option("mode", T::Choice).value("a").choices({"a", "b"}),
      option("sizes", T::IntegerList).value("[1, 2]"),
      option("scales", T::NumberList).value("[0.5]"),
      option("names", T::StringList).value("[]"),
      option("needed", T::String).required(),
      option("adapter.rank", T::Integer).value("0"),
      option("adapter.deep.scale", T::Number).value("1.0"),
      option("adapter.load", T::EntryList)
          .value("[]")
          .entries({option("file", T::String).required(), option("scale", T::Number).value("1.0"),
                    option("train", T::Boolean).value("false"), option("tags", T::StringList).value("[]")}),
  };
  return schema;
}

void read_plugin_section(wanfw::Config& config, const std::string& path) {
  if (!config.has(path)) return;
  (void)config.string_at(path + ".name");
  const wanfw::Options options = config.section(path, plugin_schema(), {"name", "inner"});
  for (const wanfw::Options& entry : options.entries("adapter.load")) (void)entry.string("file");
  config.record_resolved(options, "fuzz");
  if (config.has(path + ".inner")) read_plugin_section(config, path + ".inner");  // a subsection, as grad_accum's
}

}  // namespace

WANFW_FUZZ_TARGET(config_loader) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const std::size_t end = input.find('\0', start);
    parts.emplace_back(input.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  const std::string yaml = parts.front();
  parts.erase(parts.begin());
  try {
    wanfw::Config config = wanfw::Config::parse(yaml, "fuzz.yaml", parts);
    config.check_top_level_keys(wanfw::top_level_sections());
    (void)wanfw::CoreSettings::from(config);
    read_plugin_section(config, "model");
    read_plugin_section(config, "strategy");
    const std::size_t loggers = config.sequence_size("loggers");
    for (std::size_t i = 0; i < loggers && i < 8; ++i) read_plugin_section(config, "loggers." + std::to_string(i));
    (void)config.resolved_yaml();
  } catch (const wanfw::ConfigError&) {
  }
  return 0;
}
