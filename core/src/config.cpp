#include "config.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "bounded_input.hpp"
#include "options_impl.hpp"

namespace wanfw {

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream in(path);
  std::string part;
  while (std::getline(in, part, '.')) parts.push_back(part);
  return parts;
}

/// A list index: digits only, and short enough to convert (no list holds a billion entries).
bool is_index(const std::string& part) {
  return !part.empty() && part.size() <= 9 &&
         std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// "loggers.0.name" -> "loggers[0].name"
std::string display_path(const std::string& path) {
  std::string out;
  for (const auto& part : split_path(path)) {
    if (is_index(part)) out += "[" + part + "]";
    else out += (out.empty() ? "" : ".") + part;
  }
  return out;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::string::npos;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  return best_distance <= limit ? best : std::string();
}

struct Config::Impl {
  std::string source;
  YAML::Node root;
  std::map<std::string, SourceLocation> override_locations;  ///< path -> "--set path=..."
  std::vector<std::pair<std::string, YAML::Node>> resolved;  ///< section path -> resolved values
  std::vector<std::pair<std::string, std::string>> resolved_values;  ///< key path -> YAML text
  std::vector<std::string> notes;

  /// The node at `path`, or an undefined node. Never creates nodes.
  YAML::Node find(const std::string& path) const {
    YAML::Node current;
    current.reset(root);
    for (const auto& part : split_path(path)) {
      YAML::Node next;
      if (current.IsSequence() && is_index(part)) {
        const auto index = std::stoul(part);
        if (index >= current.size()) return YAML::Node(YAML::NodeType::Undefined);
        next.reset(current[index]);
      } else if (current.IsMap()) {
        const YAML::Node& const_current = current;
        YAML::Node child = const_current[part];
        if (!child) return YAML::Node(YAML::NodeType::Undefined);
        next.reset(child);
      } else {
        return YAML::Node(YAML::NodeType::Undefined);
      }
      current.reset(next);
    }
    return current;
  }

  SourceLocation where(const std::string& path, const YAML::Node& node) const {
    for (std::string p = path;;) {
      auto it = override_locations.find(p);
      if (it != override_locations.end()) return it->second;
      const auto dot = p.rfind('.');
      if (dot == std::string::npos) break;
      p.resize(dot);
    }
    if (node && node.IsDefined()) return location_of(node, source);
    return {source, 0, 0};
  }

  /// `--set <section>.name=X` where the file's section names another plugin: the section is the
  /// new plugin's, so the old plugin's options (those no earlier --set gave) are dropped, with a note.
  void replace_plugin_section(const std::string& name_path, const YAML::Node& value) {
    const std::string section = name_path.substr(0, name_path.rfind('.'));
    if (section == "run") return;  // run.name names the run, not a plugin
    YAML::Node parent = find(section);
    if (!parent.IsMap() || !value.IsScalar()) return;
    const YAML::Node old_name = parent["name"];
    if (!old_name || !old_name.IsScalar() || old_name.Scalar() == value.Scalar()) return;
    std::vector<std::string> dropped;
    for (const auto& entry : parent) {
      if (!entry.first.IsScalar()) continue;
      const std::string key = entry.first.Scalar();
      if (key != "name" && !override_locations.count(section + "." + key)) dropped.push_back(key);
    }
    for (const auto& key : dropped) parent.remove(key);
    if (!dropped.empty())
      notes.push_back(fmt::format("--set {}={} replaces the '{}' section of {}: its other options ({}) belonged to "
                                  "'{}' and were dropped; give the new plugin's options with --set {}.<option>=...",
                                  name_path, value.Scalar(), display_path(section), source, fmt::join(dropped, ", "),
                                  old_name.Scalar(), section));
  }

  void apply_override(const std::string& text) {
    const SourceLocation here{"--set " + text, 0, 0};
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(here, "an override must look like key.path=value",
                        "for example --set trainer.max_steps=100");
    const std::string path = text.substr(0, eq);
    YAML::Node value;
    try {
      value = YAML::Load(text.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw ConfigError(here, fmt::format("the value is not valid YAML: {}", e.msg),
                        "quote strings that contain YAML syntax");
    }
    if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
    const auto parts = split_path(path);
    if (parts.size() >= 2 && parts.back() == "name") replace_plugin_section(path, value);
    YAML::Node current;
    current.reset(root);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto& part = parts[i];
      if (part.empty()) throw ConfigError(here, fmt::format("'{}' has an empty path component", path));
      const bool last = i + 1 == parts.size();
      if (current.IsSequence()) {
        if (!is_index(part) || std::stoul(part) >= current.size())
          throw ConfigError(here, fmt::format("'{}' is a list with {} entries; '{}' is not one of its indices",
                                              display_path(path.substr(0, path.find(part) - 1)),
                                              current.size(), part));
        if (last) current[std::stoul(part)] = value;
        else {
          YAML::Node next;
          next.reset(current[std::stoul(part)]);
          current.reset(next);
        }
        continue;
      }
      if (!current.IsMap()) current = YAML::Node(YAML::NodeType::Map);
      if (last) {
        current[part] = value;
      } else {
        YAML::Node next;
        next.reset(current[part]);
        if (!next.IsMap() && !next.IsSequence()) {
          current[part] = YAML::Node(YAML::NodeType::Map);
          next.reset(current[part]);
        }
        current.reset(next);
      }
    }
    override_locations[path] = here;
  }
};

Config::Config() : impl_(std::make_shared<Impl>()) {}
Config::~Config() = default;
// Copies share the (never modified after parsing) YAML tree, which keeps its source positions;
// YAML::Clone would drop them.
Config::Config(const Config& other) : impl_(std::make_shared<Impl>(*other.impl_)) {}
Config& Config::operator=(const Config& other) {
  if (this != &other) impl_ = Config(other).impl_;
  return *this;
}

namespace {

constexpr std::size_t kMaxNesting = 64;  ///< mappings and lists inside each other; configs need a handful

/// Refuses a node that contains itself (an alias to one of its own anchors: `s: &s {inner: *s}`),
/// nesting deeper than kMaxNesting and mapping keys that are not names, before anything walks
/// the tree recursively or converts a key.
void refuse_cycles(const YAML::Node& node, std::vector<YAML::Node>& ancestors, const std::string& source,
                   const YAML::Mark& where) {
  for (const auto& ancestor : ancestors)
    if (ancestor.is(node))
      throw ConfigError(SourceLocation{source, where.line + 1, where.column + 1},
                        "this value contains itself: a YAML alias refers to an anchor around it",
                        "copy the section instead of aliasing it, or alias a section outside this one");
  if (ancestors.size() >= kMaxNesting)
    throw ConfigError(SourceLocation{source, where.line + 1, where.column + 1},
                      fmt::format("the config nests mappings and lists more than {} deep", kMaxNesting));
  if (!node.IsMap() && !node.IsSequence()) return;
  ancestors.push_back(node);
  for (const auto& entry : node) {
    if (node.IsMap() && !entry.first.IsScalar())
      throw ConfigError(SourceLocation{source, entry.first.Mark().line + 1, entry.first.Mark().column + 1},
                        "a mapping key must be a name, not a list or mapping", "write `key: value`");
    if (node.IsMap()) refuse_cycles(entry.second, ancestors, source, entry.first.Mark());
    else refuse_cycles(entry, ancestors, source, entry.Mark());
  }
  ancestors.pop_back();
}

}  // namespace

Config Config::parse(const std::string& yaml_text, const std::string& source_name,
                     const std::vector<std::string>& overrides) {
  Config config;
  config.impl_->source = source_name;
  try {
    config.impl_->root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError({source_name, e.mark.line + 1, e.mark.column + 1}, fmt::format("YAML syntax error: {}", e.msg),
                      "check indentation and quoting around this position");
  }
  auto& root = config.impl_->root;
  if (root.IsNull() || !root.IsDefined()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap())
    throw ConfigError(location_of(root, source_name), "the top level of a config must be a mapping of sections",
                      "see examples/quickstart.yaml");
  std::vector<YAML::Node> ancestors;
  refuse_cycles(root, ancestors, source_name, root.Mark());
  for (const auto& text : overrides) config.impl_->apply_override(text);
  return config;
}

Config Config::load(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  constexpr std::uintmax_t kMaxConfigBytes = 16 << 20;
  const std::string text = read_bounded_file(path, "config file", kMaxConfigBytes, [&](const std::string& problem) {
    throw ConfigError({path.string(), 0, 0}, problem, "pass the experiment's YAML file");
  });
  return parse(text, path.string(), overrides);
}

const std::string& Config::source_name() const { return impl_->source; }

bool Config::has(const std::string& path) const { return impl_->find(path).IsDefined(); }

SourceLocation Config::where(const std::string& path) const { return impl_->where(path, impl_->find(path)); }

void Config::check_top_level_keys(const std::vector<std::string>& allowed) const {
  for (const auto& entry : impl_->root) {
    const auto key = entry.first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    const auto suggestion = closest_match(key, allowed);
    throw ConfigError(impl_->where(key, entry.first), fmt::format("unknown section '{}'", key),
                      suggestion.empty() ? fmt::format("valid sections: {}", fmt::join(allowed, ", "))
                                         : fmt::format("did you mean '{}'?", suggestion));
  }
}

std::string Config::string_at(const std::string& path) const {
  const YAML::Node node = impl_->find(path);
  if (!node.IsDefined() || node.IsNull())
    throw ConfigError(where(path.substr(0, path.rfind('.'))), fmt::format("'{}' is missing", display_path(path)),
                      fmt::format("add '{}: <name>'", split_path(path).back()));
  if (!node.IsScalar())
    throw ConfigError(where(path), fmt::format("'{}' must be a string", display_path(path)));
  std::string value = node.as<std::string>();
  if (value.find('\0') != std::string::npos)
    throw ConfigError(where(path), fmt::format("'{}' contains a NUL byte", display_path(path)));
  return value;
}

std::size_t Config::sequence_size(const std::string& path) const {
  const YAML::Node node = impl_->find(path);
  if (!node.IsDefined() || node.IsNull()) return 0;
  if (!node.IsSequence())
    throw ConfigError(where(path), fmt::format("'{}' must be a list", display_path(path)),
                      fmt::format("write it as '{}:' followed by '- name: ...' entries", display_path(path)));
  return node.size();
}

std::vector<std::string> Config::keys_at(const std::string& path) const {
  const YAML::Node node = impl_->find(path);
  std::vector<std::string> keys;
  if (!node.IsMap()) return keys;
  for (const auto& entry : node)
    if (entry.first.IsScalar()) keys.push_back(entry.first.Scalar());
  return keys;
}

namespace {

void check_value(const Options& options, const OptionSpec& spec, const YAML::Node& value) {
  const auto& name = spec.name;
  auto expect_scalar = [&](const char* what) {
    if (!value.IsScalar()) options.fail(name, fmt::format("expected {}", what));
  };
  switch (spec.type) {
    case OptionType::Integer:
      expect_scalar("an integer");
      (void)options.integer(name);
      break;
    case OptionType::Number:
      expect_scalar("a number");
      (void)options.number(name);
      break;
    case OptionType::Boolean:
      expect_scalar("true or false");
      (void)options.boolean(name);
      break;
    case OptionType::String: expect_scalar("a string"); break;
    case OptionType::Choice: {
      expect_scalar(fmt::format("one of {}", fmt::join(spec.choices, ", ")).c_str());
      const auto text = value.as<std::string>();
      if (std::find(spec.choices.begin(), spec.choices.end(), text) == spec.choices.end()) {
        const auto suggestion = closest_match(text, spec.choices);
        options.fail(name, fmt::format("'{}' is not one of {}", text, fmt::join(spec.choices, ", ")),
                     suggestion.empty() ? "" : fmt::format("did you mean '{}'?", suggestion));
      }
      break;
    }
    case OptionType::IntegerList: (void)options.integers(name); break;
    case OptionType::NumberList: (void)options.numbers(name); break;
    case OptionType::StringList: (void)options.strings(name); break;
  }
}

}  // namespace

Options Config::section(const std::string& path, const OptionSchema& schema,
                        const std::vector<std::string>& extra_keys) const {
  auto impl = std::make_shared<Options::Impl>();
  impl->section = display_path(path);
  impl->source = impl_->source;
  impl->schema = schema;
  const YAML::Node node = impl_->find(path);
  impl->section_location = impl_->where(path, node);
  const Options view(impl);
  if (node.IsDefined() && !node.IsNull() && !node.IsMap())
    throw ConfigError(impl->section_location, fmt::format("'{}' must be a mapping of options", impl->section));

  std::vector<std::string> known = extra_keys;
  for (const auto& spec : schema) known.push_back(spec.name);
  if (node.IsMap()) {
    for (const auto& entry : node) {
      const auto key = entry.first.as<std::string>();
      const std::string key_path = path + "." + key;
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        const auto suggestion = closest_match(key, known);
        throw ConfigError(impl_->where(key_path, entry.first),
                          fmt::format("unknown key '{}' in '{}'", key, impl->section),
                          suggestion.empty() ? fmt::format("valid keys: {}", fmt::join(known, ", "))
                                             : fmt::format("did you mean '{}'?", suggestion));
      }
      impl->locations[key] = impl_->where(key_path, entry.second);
    }
  }
  for (const auto& spec : schema) {
    YAML::Node value = node.IsMap() ? YAML::Node(node[spec.name]) : YAML::Node(YAML::NodeType::Undefined);
    if (value.IsDefined() && !value.IsNull()) {
      impl->values[spec.name] = value;
    } else if (!spec.default_yaml.empty()) {
      impl->values[spec.name] = YAML::Load(spec.default_yaml);
    } else if (spec.required) {
      throw ConfigError(impl->section_location,
                        fmt::format("'{}' needs the option '{}' ({})", impl->section, spec.name, spec.doc),
                        fmt::format("add '{}: <{}>'", spec.name, option_type_name(spec.type)));
    }
  }
  for (const auto& spec : schema)
    if (impl->values.count(spec.name)) check_value(view, spec, impl->values.at(spec.name));
  return view;
}

void Config::record_resolved(const Options& options, const std::string& plugin_name) {
  YAML::Node node(YAML::NodeType::Map);
  if (!plugin_name.empty()) node["name"] = plugin_name;
  for (const auto& spec : options.impl().schema) {
    auto it = options.impl().values.find(spec.name);
    if (it != options.impl().values.end()) node[spec.name] = YAML::Clone(it->second);
  }
  std::string path;
  for (const char c : options.section()) {
    if (c == '[') path += '.';
    else if (c != ']') path += c;
  }
  impl_->resolved.emplace_back(path, node);
}

void Config::record_resolved_value(const std::string& path, const std::string& yaml) {
  impl_->resolved_values.emplace_back(path, yaml);
}

const std::vector<std::string>& Config::notes() const { return impl_->notes; }

std::string Config::resolved_yaml() const {
  Config copy(*this);
  copy.impl_->root = YAML::Clone(impl_->root);  // edited below; positions are not needed
  for (const auto& [path, node] : impl_->resolved) {
    // Replace the section in the copy (keeping nested sections that were resolved separately).
    YAML::Node target = copy.impl_->find(path);
    if (target.IsMap()) {
      for (const auto& entry : node) target[entry.first.as<std::string>()] = entry.second;
    } else {
      copy.impl_->apply_override(path + "={}");
      YAML::Node fresh = copy.impl_->find(path);
      for (const auto& entry : node) fresh[entry.first.as<std::string>()] = entry.second;
    }
  }
  for (const auto& [path, yaml] : impl_->resolved_values) copy.impl_->apply_override(path + "=" + yaml);
  YAML::Emitter out;
  out << copy.impl_->root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace wanfw
