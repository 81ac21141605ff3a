#pragma once
// Internal: what a Config holds, and the key paths ("loggers.0.name") its parts share.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "config/config.hpp"
#include "config/options_impl.hpp"

namespace wanfw {

/// "a.b.0.c" -> {"a", "b", "0", "c"}
std::vector<std::string> split_path(const std::string& path);
/// A list index: digits only, and short enough to convert (no list holds a billion entries).
bool is_index(const std::string& part);
/// "loggers.0.name" -> "loggers[0].name"
std::string display_path(const std::string& path);

struct Config::Impl {
  std::string source;
  YAML::Node root;
  std::map<std::string, SourceLocation> override_locations;  ///< path -> "--set path=..."
  std::vector<std::pair<std::string, YAML::Node>> resolved;  ///< section path -> resolved values
  std::vector<std::pair<std::string, std::string>> resolved_values;  ///< key path -> YAML text
  std::vector<std::string> notes;
  std::vector<std::string> omitted;  // left out of resolved_yaml

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

}  // namespace wanfw
