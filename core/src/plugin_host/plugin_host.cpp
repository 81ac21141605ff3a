#include "plugin_host/plugin_host.hpp"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include "config/config.hpp"
#include "plugin_host/plugin_file.hpp"

namespace fs = std::filesystem;

namespace wanfw {

const char* plugin_kind_name(PluginKind kind) {
  switch (kind) {
    case PluginKind::Model: return "model";
    case PluginKind::Strategy: return "strategy";
    case PluginKind::Logger: return "logger";
    case PluginKind::Dataset: return "dataset";
  }
  return "unknown";
}

namespace {

PluginDescriptor describe(PluginKind kind, std::string name, std::string version, std::string summary) {
  PluginDescriptor d;
  d.kind = kind;
  d.name = std::move(name);
  d.version = std::move(version);
  d.summary = std::move(summary);
  return d;
}

/// Libraries are loaded once and never unloaded: objects they made may live until exit, and
/// unloading code that static destructors or thread-locals still point into is never safe.
void keep_loaded(boost::dll::shared_library library) {
  static std::mutex mutex;
  static auto* libraries = new std::deque<boost::dll::shared_library>();  // intentionally leaked
  std::lock_guard<std::mutex> lock(mutex);
  libraries->push_back(std::move(library));
}

constexpr const char* kEntryName = "wanfw_plugin_entry";

}  // namespace

PluginDescriptor PluginDescriptor::for_model(std::string name, std::string version, std::string summary) {
  return describe(PluginKind::Model, std::move(name), std::move(version), std::move(summary));
}
PluginDescriptor PluginDescriptor::for_strategy(std::string name, std::string version, std::string summary) {
  return describe(PluginKind::Strategy, std::move(name), std::move(version), std::move(summary));
}
PluginDescriptor PluginDescriptor::for_logger(std::string name, std::string version, std::string summary) {
  return describe(PluginKind::Logger, std::move(name), std::move(version), std::move(summary));
}

PluginDescriptor PluginDescriptor::for_dataset(std::string name, std::string version, std::string summary) {
  return describe(PluginKind::Dataset, std::move(name), std::move(version), std::move(summary));
}

std::vector<fs::path> PluginHost::search_path(const std::vector<fs::path>& config_paths) {
  std::vector<fs::path> folders = config_paths;
  if (const char* env = std::getenv("WANFW_PLUGIN_PATH")) {
    std::stringstream in(env);
    std::string item;
    while (std::getline(in, item, ':'))
      if (!item.empty()) folders.emplace_back(item);
  }
  // The install's own plugins: <prefix>/bin/wanfw -> <prefix>/lib/wanfw/plugins.
  const fs::path exe = boost::dll::program_location().parent_path();
  folders.push_back((exe.parent_path() / "lib" / "wanfw" / "plugins").lexically_normal());
  return folders;
}

PluginInfo PluginHost::load_library(const fs::path& path) {
  // Checked on the file before the library is loaded: a refused plugin runs no code at all.
  const PluginRecord record = read_plugin_record(path);
  if (record.abi_version != host_plugin_abi_version())
    throw PluginError(fmt::format("{}: built for wanfw plugin ABI version {} (wanfw {}), but this wanfw uses plugin ABI "
                                  "version {} (wanfw {})",
                                  path.string(), record.abi_version, record.wanfw_version, host_plugin_abi_version(),
                                  version()),
                      "rebuild the plugin against this wanfw's SDK (find_package(wanfw) from its install)");
  if (std::string(record.torch_version) != host_torch_version())
    throw PluginError(fmt::format("{}: built against LibTorch {}, but this wanfw runs LibTorch {}", path.string(),
                                  record.torch_version, host_torch_version()),
                      "rebuild the plugin against the LibTorch wanfw was built with (find_package(wanfw) selects it)");
  const auto kind = static_cast<PluginKind>(record.kind);
  if (kind != PluginKind::Model && kind != PluginKind::Strategy && kind != PluginKind::Logger &&
      kind != PluginKind::Dataset)
    throw PluginError(fmt::format("{}: its record names an unknown plugin kind {}", path.string(), record.kind));

  boost::dll::shared_library library;
  try {
    library.load(path, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw PluginError(fmt::format("{}: cannot be loaded as a shared library: {}", path.string(), e.what()),
                      "rebuild it, or remove it from the plugin folder");
  }
  if (!library.has(kEntryName))
    throw PluginError(fmt::format("{}: has a plugin record but exports no '{}' entry", path.string(), kEntryName),
                      "plugins end with WANFW_PLUGIN(kind, describe); rebuild it");
  const PluginDescriptor* descriptor = library.get<PluginEntry>(kEntryName)();
  if (descriptor == nullptr)
    throw PluginError(fmt::format("{}: its plugin entry returned no descriptor", path.string()));
  if (descriptor->kind != kind)
    throw PluginError(fmt::format("{}: its record says it is a {} plugin, its descriptor a {} plugin", path.string(),
                                  plugin_kind_name(kind), plugin_kind_name(descriptor->kind)),
                      "use the same kind in WANFW_PLUGIN(kind, ...) and PluginDescriptor::for_<kind>");
  const bool factory_ok = (descriptor->kind == PluginKind::Model && descriptor->make_model) ||
                          (descriptor->kind == PluginKind::Strategy && descriptor->make_strategy) ||
                          (descriptor->kind == PluginKind::Logger && descriptor->make_logger) ||
                          (descriptor->kind == PluginKind::Dataset && descriptor->make_dataset);
  if (!factory_ok || descriptor->name.empty())
    throw PluginError(fmt::format("{}: its descriptor has no name or no {} factory", path.string(),
                                  plugin_kind_name(descriptor->kind)));
  keep_loaded(std::move(library));
  return PluginInfo{path, descriptor};
}

PluginHost::PluginHost(std::vector<fs::path> folders) : folders_(std::move(folders)) {
  for (const auto& folder : folders_) {
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) {
      spdlog::debug("plugin folder {} does not exist; skipped", folder.string());
      continue;
    }
    std::vector<fs::path> files;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() != ".so") continue;
      // A bad entry (a symlink loop or a dangling link, a pipe) is listed and skipped; the scan goes on.
      std::error_code entry_error;
      const fs::file_status status = it->status(entry_error);
      if (fs::is_directory(status)) continue;
      if (entry_error)
        skipped_.push_back({it->path(), fmt::format("cannot be read: {}", entry_error.message()), std::nullopt,
                            PluginKind::Model, ""});
      else if (!fs::is_regular_file(status))
        skipped_.push_back({it->path(), "is not a regular file", std::nullopt, PluginKind::Model, ""});
      else
        files.push_back(it->path());
    }
    if (ec) spdlog::warn("plugin folder {}: listing stopped early: {}", folder.string(), ec.message());
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      try {
        PluginInfo info = load_library(file);
        auto same = std::find_if(plugins_.begin(), plugins_.end(), [&](const PluginInfo& p) {
          return p.descriptor->kind == info.descriptor->kind && p.descriptor->name == info.descriptor->name;
        });
        if (same == plugins_.end()) {
          plugins_.push_back(info);
        } else if (same->path.parent_path() == file.parent_path()) {
          skipped_.push_back({file,
                              fmt::format("{} plugin '{}' is also defined by {}", plugin_kind_name(info.descriptor->kind),
                                          info.descriptor->name, same->path.string()),
                              same->path, info.descriptor->kind, info.descriptor->name});
        } else {
          skipped_.push_back({file, fmt::format("shadowed by {} (earlier in the search path)", same->path.string()),
                              std::nullopt, info.descriptor->kind, info.descriptor->name});
        }
      } catch (const PluginError& e) {
        skipped_.push_back({file, e.what(), std::nullopt, PluginKind::Model, ""});
      }
    }
  }
}

PluginHost::~PluginHost() = default;

const PluginInfo& PluginHost::find(PluginKind kind, const std::string& name, const SourceLocation& where) const {
  for (const auto& skipped : skipped_)  // two plugins with one name in one folder: refuse to guess
    if (skipped.conflicts_with && skipped.kind == kind && skipped.name == name)
      throw ConfigError(where, fmt::format("two {} plugins are named '{}': {} and {}", plugin_kind_name(kind), name,
                                           skipped.conflicts_with->string(), skipped.path.string()),
                        "remove or rename one of them");
  std::vector<std::string> names;
  std::string other_kind;
  for (const auto& plugin : plugins_) {
    if (plugin.descriptor->kind == kind) {
      if (plugin.descriptor->name == name) return plugin;
      names.push_back(plugin.descriptor->name);
    } else if (plugin.descriptor->name == name) {
      other_kind = plugin_kind_name(plugin.descriptor->kind);
    }
  }
  std::string message = fmt::format("no {} plugin named '{}'", plugin_kind_name(kind), name);
  if (!other_kind.empty()) message += fmt::format(" ('{}' is a {} plugin)", name, other_kind);
  std::string hint;
  const auto suggestion = closest_match(name, names);
  if (!suggestion.empty()) hint = fmt::format("did you mean '{}'? ", suggestion);
  hint += names.empty() ? fmt::format("no {} plugins were found", plugin_kind_name(kind))
                        : fmt::format("available {} plugins: {}", plugin_kind_name(kind), fmt::join(names, ", "));
  std::string folders;
  for (const auto& folder : folders_) folders += "\n    " + folder.string();
  hint += "\n  searched:" + folders;
  for (const auto& skipped : skipped_) hint += fmt::format("\n  refused {}: {}", skipped.path.string(), skipped.reason);
  throw ConfigError(where, message, hint);
}

}  // namespace wanfw
