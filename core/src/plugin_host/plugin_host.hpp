#pragma once
// Finds, loads and checks plugin libraries, and builds plugin objects from config sections.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wanfw/plugin.hpp"

namespace wanfw {

class Config;

/// One plugin library that loaded and passed the checks.
struct PluginInfo {
  std::filesystem::path path;
  const PluginDescriptor* descriptor = nullptr;
};

/// A library that was looked at but not accepted, and why.
struct SkippedLibrary {
  std::filesystem::path path;
  std::string reason;
  /// For a second plugin of one kind and name in the same folder: the file that defines it first.
  std::optional<std::filesystem::path> conflicts_with;
  PluginKind kind = PluginKind::Model;
  std::string name;
};

/// Throws ConfigError at the first key of `section` that `plugin` lists as removed, with its hint.
void refuse_removed_options(const Config& config, const std::string& section, const PluginInfo& plugin);

class PluginHost {
 public:
  /// The folders searched, in order: `config_paths` (the config's plugin_path), then
  /// $WANFW_PLUGIN_PATH (colon separated), then the plugin folder of the install.
  static std::vector<std::filesystem::path> search_path(
      const std::vector<std::filesystem::path>& config_paths);

  /// Scans `folders` for lib*.so files. Libraries that are not wanfw plugins are recorded as
  /// skipped; a plugin built for another ABI or LibTorch, or two plugins of one kind and name,
  /// raise PluginError naming the files.
  explicit PluginHost(std::vector<std::filesystem::path> folders);
  ~PluginHost();
  PluginHost(const PluginHost&) = delete;
  PluginHost& operator=(const PluginHost&) = delete;

  const std::vector<std::filesystem::path>& folders() const { return folders_; }
  const std::vector<PluginInfo>& plugins() const { return plugins_; }
  const std::vector<SkippedLibrary>& skipped() const { return skipped_; }

  /// The plugin of `kind` called `name`; throws ConfigError (at `where`) listing the ones found.
  const PluginInfo& find(PluginKind kind, const std::string& name, const SourceLocation& where) const;

  /// Builds the plugin object named by the config section at `section` (its `name:` key),
  /// validating the section against the plugin's option schema and recording the resolved
  /// options in `config`. Objects keep their library loaded for as long as they live.
  std::shared_ptr<Model> make_model(Config& config, const std::string& section, const PluginContext& context) const;
  std::shared_ptr<Strategy> make_strategy(Config& config, const std::string& section,
                                          const PluginContext& context) const;
  std::shared_ptr<Logger> make_logger(Config& config, const std::string& section, const PluginContext& context) const;
  /// The decoder of the model plugin the section names (PluginDescriptor::make_decoder); null when
  /// that plugin has none or its options name none.
  std::shared_ptr<VideoDecoder> make_decoder(Config& config, const std::string& section,
                                             const PluginContext& context) const;
  /// The data set plugin `name` (the data section's `name`, or the default the core chose), built
  /// from `section`, whose `core_keys` belong to the core and are not the plugin's options.
  std::shared_ptr<Dataset> make_dataset(Config& config, const std::string& section, const std::string& name,
                                        const std::vector<std::string>& core_keys, const PluginContext& context) const;

  /// Checks the section at `section` against the schema of the plugin of `kind` its `name:` key
  /// names (removed options, unknown keys, types, choices) without building anything: a section the
  /// command does not build (the strategy of a config a one-process command reads) is still the
  /// one a run would accept. Throws ConfigError as building it would.
  void check_section(const Config& config, const std::string& section, PluginKind kind) const;
  /// The buckets the data set section `section` describes for the data set plugin `name` (its
  /// PluginDescriptor::data_buckets, the section checked first, `core_keys` not the plugin's);
  /// none when the plugin declares none.
  std::vector<Bucket> data_buckets(const Config& config, const std::string& section, const std::string& name,
                                   const std::vector<std::string>& core_keys) const;

  /// Loads one library and checks it; throws PluginError naming the file and the reason.
  static PluginInfo load_library(const std::filesystem::path& path);

 private:
  std::vector<std::filesystem::path> folders_;
  std::vector<PluginInfo> plugins_;
  std::vector<SkippedLibrary> skipped_;
};

}  // namespace wanfw
