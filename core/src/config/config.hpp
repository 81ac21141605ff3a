#pragma once
// The experiment configuration: a YAML file plus `--set` overrides, validated section by
// section against option schemas. Every error names file:line:column.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "wanfw/options.hpp"

namespace wanfw {

class Config {
 public:
  /// Loads `path` and applies overrides of the form "a.b.c=value" (value parsed as YAML).
  /// Throws ConfigError for unreadable files, YAML syntax errors and malformed overrides.
  static Config load(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});
  /// Parses YAML text; `source_name` is used in error locations.
  static Config parse(const std::string& yaml_text, const std::string& source_name,
                      const std::vector<std::string>& overrides = {});

  Config();
  ~Config();
  Config(const Config&);
  Config& operator=(const Config&);

  const std::string& source_name() const;

  /// Rejects top-level keys outside `allowed` (suggesting the closest).
  void check_top_level_keys(const std::vector<std::string>& allowed) const;
  bool has(const std::string& path) const;

  /// Validates the mapping at `path` (e.g. "trainer") against `schema`: unknown keys, types
  /// and choices are checked, defaults filled in. `extra_keys` are accepted without checks
  /// (e.g. "name" in a plugin section). A missing section validates as empty.
  Options section(const std::string& path, const OptionSchema& schema,
                  const std::vector<std::string>& extra_keys = {}) const;

  /// The string at `path` (e.g. "model.name"); throws ConfigError when absent or not a string.
  std::string string_at(const std::string& path) const;
  /// Number of entries of the sequence at `path` (0 when absent); throws when not a sequence.
  std::size_t sequence_size(const std::string& path) const;
  SourceLocation where(const std::string& path) const;
  /// The keys of the mapping at `path` (none when absent or not a mapping).
  std::vector<std::string> keys_at(const std::string& path) const;
  /// Whether a `--set` override wrote `path` itself.
  bool overridden(const std::string& path) const;
  /// Removes the key at `path` ("data.num_samples": an option of a plugin the section no longer
  /// names); nothing when absent.
  void remove(const std::string& path);

  /// Records the resolved options of a section, so that `resolved_yaml` shows every value.
  void record_resolved(const Options& options, const std::string& plugin_name = "");
  /// Records the value a key resolved to (a default computed from elsewhere, a path made
  /// absolute), as YAML text; `resolved_yaml` writes it in place of what the file said.
  void record_resolved_value(const std::string& path, const std::string& yaml);
  /// Leaves `path` out of `resolved_yaml`: an option the run does not use (trainer.epochs when
  /// trainer.max_steps decides), which would otherwise be shown with a value that says nothing.
  void omit_resolved(const std::string& path);
  /// Adds a sentence to `notes`.
  void note(std::string sentence);

  /// Things the user should know about how the config was read (an override that replaced a
  /// plugin section, say), one sentence each; the caller logs them.
  const std::vector<std::string>& notes() const;
  /// The configuration as it will run: every section with defaults filled in.
  std::string resolved_yaml() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

/// The closest candidate to `word` (edit distance), or "" when nothing is close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

/// `text` as a double-quoted YAML scalar.
std::string yaml_quoted(const std::string& text);

}  // namespace wanfw
