#pragma once
// The plugin contract. A plugin library exports exactly one entry, made by WANFW_PLUGIN, that
// returns a PluginDescriptor. The host reads `abi_version` and `torch_version` first and
// refuses a plugin whose values differ from its own before it touches anything else.
//
//   #include <wanfw/plugin.hpp>
//   static wanfw::PluginDescriptor describe() {
//     wanfw::PluginDescriptor d = wanfw::PluginDescriptor::for_model("my_model", "1.0.0", "...");
//     d.options = {wanfw::option("width", wanfw::OptionType::Integer).value("64").doc("...")};
//     d.make_model = [](const wanfw::Options& o, const wanfw::PluginContext& c) { ... };
//     return d;
//   }
//   WANFW_PLUGIN(describe)

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/dll/alias.hpp>

#include "wanfw/logger.hpp"
#include "wanfw/model.hpp"
#include "wanfw/options.hpp"
#include "wanfw/strategy.hpp"
#include "wanfw/version.hpp"

namespace wanfw {

enum class PluginKind : std::uint32_t { Model = 1, Strategy = 2, Logger = 3 };
const char* plugin_kind_name(PluginKind kind);

class Config;
class PluginHost;

/// What the host hands a factory besides the plugin's own options.
struct PluginContext {
  std::uint64_t seed = 0;
  /// Lets a plugin build other plugins (a strategy that wraps another one).
  const PluginHost* host = nullptr;
  /// The config path of the section being built ("strategy", "strategy.inner").
  std::string section;
  /// The whole config, for plugins that build others from their subsections.
  Config* config = nullptr;
};

struct PluginDescriptor {
  // -- Read before anything else; keep these two first and never change their types. --------
  std::uint32_t abi_version = WANFW_PLUGIN_ABI_VERSION;
  const char* torch_version = WANFW_TORCH_VERSION_STRING;
  // --------------------------------------------------------------------------------------------
  PluginKind kind = PluginKind::Model;
  std::string name;
  std::string version;
  std::string summary;
  OptionSchema options;
  /// Keys of this plugin's section that hold another plugin's section (a strategy's `inner`);
  /// they are not options, and the plugin builds them through PluginContext::host.
  std::vector<std::string> subsections;

  // Exactly the factory of `kind` is set.
  std::unique_ptr<Model> (*make_model)(const Options&, const PluginContext&) = nullptr;
  std::unique_ptr<Strategy> (*make_strategy)(const Options&, const PluginContext&) = nullptr;
  std::unique_ptr<Logger> (*make_logger)(const Options&, const PluginContext&) = nullptr;

  /// Optional, for models: a summary (size, parameter count, memory estimate) worked out from
  /// the options alone, without allocating weights (`wanfw model-info`).
  std::string (*inspect_model)(const Options&) = nullptr;

  static PluginDescriptor for_model(std::string name, std::string version, std::string summary);
  static PluginDescriptor for_strategy(std::string name, std::string version, std::string summary);
  static PluginDescriptor for_logger(std::string name, std::string version, std::string summary);
};

/// The signature of the exported entry.
using PluginEntry = const PluginDescriptor*();

}  // namespace wanfw

/// Exports `describe_fn` (a function returning PluginDescriptor) as the library's plugin entry.
/// The versions are stamped here, in the plugin's own translation unit, so they record what the
/// plugin was compiled with even though the descriptor's helpers live in the host library.
#define WANFW_PLUGIN(describe_fn)                                           \
  namespace {                                                               \
  const ::wanfw::PluginDescriptor* wanfw_plugin_entry_impl() {              \
    static const ::wanfw::PluginDescriptor descriptor = [] {                \
      ::wanfw::PluginDescriptor d = describe_fn();                          \
      d.abi_version = WANFW_PLUGIN_ABI_VERSION;                             \
      d.torch_version = WANFW_TORCH_VERSION_STRING;                         \
      return d;                                                             \
    }();                                                                    \
    return &descriptor;                                                     \
  }                                                                         \
  }                                                                         \
  BOOST_DLL_ALIAS(wanfw_plugin_entry_impl, wanfw_plugin_entry)
