// Config sections: a mapping validated against an option schema (nested mappings for dotted
// options, lists of entries with schemas of their own), and the resolved configuration.

#include <algorithm>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "config/config_impl.hpp"

namespace wanfw {

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
    case OptionType::EntryList:
      if (!value.IsSequence())
        options.fail(name, "expected a list of mappings", fmt::format("write each entry as '- {{{}: ...}}'",
                                                                      spec.entries.empty() ? "key" : spec.entries.front().name));
      break;
  }
}

/// The node of option `name` below `node` ("lora.rank": node["lora"]["rank"]); undefined when absent.
YAML::Node nested_value(const YAML::Node& node, const std::string& name) {
  YAML::Node current;
  current.reset(node);
  for (const auto& part : split_path(name)) {
    if (!current.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& const_current = current;
    YAML::Node child = const_current[part];
    if (!child) return YAML::Node(YAML::NodeType::Undefined);
    YAML::Node next;
    next.reset(child);
    current.reset(next);
  }
  return current;
}

/// The keys a mapping at `prefix` ("" the section itself, "lora." a nested mapping) may hold: the
/// options below it and the nested mappings that lead to deeper ones.
std::vector<std::string> keys_below(const std::vector<std::string>& names, const std::string& prefix) {
  std::vector<std::string> keys;
  for (const auto& name : names) {
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string key = name.substr(prefix.size(), name.find('.', prefix.size()) - prefix.size());
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  return keys;
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
  // Every key must be an option or a mapping of dotted options ("lora:" holding "lora.rank").
  const std::function<void(const YAML::Node&, const std::string&)> check_keys = [&](const YAML::Node& map,
                                                                                    const std::string& prefix) {
    const std::vector<std::string> allowed = keys_below(known, prefix);
    for (const auto& entry : map) {
      const std::string name = prefix + entry.first.as<std::string>();
      const std::string key_path = path + "." + name;
      if (std::find(allowed.begin(), allowed.end(), name.substr(prefix.size())) == allowed.end()) {
        const auto suggestion = closest_match(name.substr(prefix.size()), allowed);
        throw ConfigError(impl_->where(key_path, entry.first),
                          fmt::format("unknown key '{}' in '{}'", name, impl->section),
                          suggestion.empty() ? fmt::format("valid keys{}: {}", prefix.empty() ? "" : " of '" + prefix.substr(0, prefix.size() - 1) + "'",
                                                           fmt::join(allowed, ", "))
                                             : fmt::format("did you mean '{}{}'?", prefix, suggestion));
      }
      if (std::find(known.begin(), known.end(), name) != known.end()) {
        impl->locations[name] = impl_->where(key_path, entry.second);
      } else if (entry.second.IsMap()) {
        check_keys(entry.second, name + ".");
      } else if (!entry.second.IsNull()) {
        throw ConfigError(impl_->where(key_path, entry.second),
                          fmt::format("'{}.{}' must be a mapping of options", impl->section, name),
                          fmt::format("its options: {}", fmt::join(keys_below(known, name + "."), ", ")));
      }
    }
  };
  if (node.IsMap()) check_keys(node, "");

  for (const auto& spec : schema) {
    YAML::Node value = node.IsMap() ? nested_value(node, spec.name) : YAML::Node(YAML::NodeType::Undefined);
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
  for (const auto& spec : schema) {
    if (!impl->values.count(spec.name)) continue;
    check_value(view, spec, impl->values.at(spec.name));
    if (spec.type != OptionType::EntryList) continue;
    // Each entry is a section of its own, named by its place: errors point into the list.
    std::vector<Options> entries;
    const std::string list_path = path + "." + spec.name;
    if (impl_->find(list_path).IsDefined())
      for (std::size_t i = 0; i < impl->values.at(spec.name).size(); ++i)
        entries.push_back(section(fmt::format("{}.{}", list_path, i), spec.entries));
    impl->entry_lists[spec.name] = std::move(entries);
  }
  return view;
}

void Config::record_resolved(const Options& options, const std::string& plugin_name) {
  YAML::Node node(YAML::NodeType::Map);
  if (!plugin_name.empty()) node["name"] = plugin_name;
  for (const auto& spec : options.impl().schema) {
    auto it = options.impl().values.find(spec.name);
    if (it == options.impl().values.end()) continue;
    YAML::Node target;  // "lora.rank" is written as lora: {rank: ...}
    target.reset(node);
    const auto parts = split_path(spec.name);
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!target[parts[i]].IsMap()) target[parts[i]] = YAML::Node(YAML::NodeType::Map);
      YAML::Node next;
      next.reset(target[parts[i]]);
      target.reset(next);
    }
    target[parts.back()] = YAML::Clone(it->second);
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

void Config::omit_resolved(const std::string& path) { impl_->omitted.push_back(path); }


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
  for (const auto& path : impl_->omitted) copy.remove(path);
  YAML::Emitter out;
  out << copy.impl_->root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace wanfw
