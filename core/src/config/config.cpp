#include "config/config_impl.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "wanfw/io/bounded_input.hpp"

namespace wanfw {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream in(path);
  std::string part;
  while (std::getline(in, part, '.')) parts.push_back(part);
  return parts;
}

bool is_index(const std::string& part) {
  return !part.empty() && part.size() <= 9 &&
         std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string display_path(const std::string& path) {
  std::string out;
  for (const auto& part : split_path(path)) {
    if (is_index(part)) out += "[" + part + "]";
    else out += (out.empty() ? "" : ".") + part;
  }
  return out;
}

namespace {
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

bool Config::overridden(const std::string& path) const { return impl_->override_locations.count(path) > 0; }

void Config::remove(const std::string& path) {
  const auto dot = path.rfind('.');
  if (dot == std::string::npos) return;
  YAML::Node parent = impl_->find(path.substr(0, dot));
  if (parent.IsMap()) parent.remove(path.substr(dot + 1));
}

std::vector<std::string> Config::keys_at(const std::string& path) const {
  const YAML::Node node = impl_->find(path);
  std::vector<std::string> keys;
  if (!node.IsMap()) return keys;
  for (const auto& entry : node)
    if (entry.first.IsScalar()) keys.push_back(entry.first.Scalar());
  return keys;
}

const std::vector<std::string>& Config::notes() const { return impl_->notes; }

void Config::note(std::string sentence) { impl_->notes.push_back(std::move(sentence)); }

std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace wanfw
