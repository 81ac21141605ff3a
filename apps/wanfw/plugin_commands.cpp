// `wanfw plugins [show NAME]` and `config-reference`: what the plugin search path holds.
#include <cstdio>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command_line.hpp"
#include "commands.hpp"
#include "config/config.hpp"
#include "plugin_host/plugin_host.hpp"
#include "run/config_reference.hpp"
#include "run/inspection.hpp"
#include "wanfw/error.hpp"

namespace wanfw::cli {

const char* const kPluginsHelp = R"(usage: wanfw plugins [CONFIG] [--plugin-path DIR]...
       wanfw plugins show NAME [CONFIG] [--plugin-path DIR]...

Lists the plugins found on the search path (each --plugin-path, then CONFIG's plugin_path, then
$WANFW_PLUGIN_PATH, then the install's plugin folder) with kind, version and file, and the
libraries that were refused and why. `show` prints one plugin's options with their types,
defaults and docs.
)";

const char* const kConfigReferenceHelp = R"(usage: wanfw config-reference [--plugin-path DIR]...

Prints every core config section and every option of every plugin found, as Markdown: the
reference in docs/configuration.md is this output.
)";

int plugins_command(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  auto folders = plugin_path_flags(args, &rest, kPluginsHelp);
  std::string show;
  if (!rest.empty() && rest[0] == "show") {
    if (rest.size() < 2) usage_error("`plugins show` needs a plugin NAME", kPluginsHelp);
    show = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.size() > 1) usage_error(fmt::format("unexpected argument '{}'", rest[1]), kPluginsHelp);
  if (!rest.empty())  // a config: its plugin_path, after the --plugin-path folders
    for (auto& folder : config_plugin_path(rest[0])) folders.push_back(std::move(folder));
  const PluginHost host(PluginHost::search_path(folders));
  if (show.empty()) {
    std::printf("%-9s %-20s %-8s %s\n", "KIND", "NAME", "VERSION", "PATH");
    for (const auto& p : host.plugins())
      std::printf("%-9s %-20s %-8s %s\n", plugin_kind_name(p.descriptor->kind), p.descriptor->name.c_str(),
                  p.descriptor->version.c_str(), p.path.c_str());
    if (host.plugins().empty()) std::printf("(no plugins found)\n");
    std::printf("\nsearched:\n");
    for (const auto& folder : host.folders()) std::printf("  %s\n", folder.c_str());
    if (!host.skipped().empty()) {
      std::printf("\nrefused:\n");
      for (const auto& s : host.skipped()) std::printf("  %s\n    %s\n", s.path.c_str(), s.reason.c_str());
    }
    return kSuccess;
  }
  bool found = false;
  std::vector<std::string> names;
  for (const auto& p : host.plugins()) {
    const PluginDescriptor& d = *p.descriptor;
    names.push_back(d.name);
    if (d.name != show) continue;
    found = true;
    std::printf("%s (%s plugin, version %s)\n  %s\n  file: %s\n\noptions:\n", d.name.c_str(), plugin_kind_name(d.kind),
                d.version.c_str(), d.summary.c_str(), p.path.c_str());
    if (d.options.empty()) std::printf("  (none)\n");
    const std::function<void(const OptionSchema&, const std::string&)> print = [&](const OptionSchema& schema,
                                                                                   const std::string& prefix) {
      for (const auto& o : schema) {
        std::string type = option_type_name(o.type);
        if (o.type == OptionType::Choice) type += fmt::format(" {{{}}}", fmt::join(o.choices, ", "));
        const std::string def = o.required               ? "required"
                                : o.default_yaml.empty() ? "unset"
                                                         : "default " + o.default_yaml;
        std::printf("  %s%s: %s, %s\n      %s\n", prefix.c_str(), o.name.c_str(), type.c_str(), def.c_str(),
                    o.doc.c_str());
        if (o.type == OptionType::EntryList) print(o.entries, prefix + o.name + "[].");
      }
    };
    print(d.options, "");
    for (const auto& key : d.subsections) std::printf("  %s: a section naming another plugin\n", key.c_str());
    std::printf("\n");
  }
  if (!found) {
    const std::string suggestion = closest_match(show, names);
    throw ConfigError({"command line", 0, 0}, fmt::format("no plugin named '{}' was found", show),
                      (suggestion.empty() ? std::string() : fmt::format("did you mean '{}'? ", suggestion)) +
                          (names.empty() ? std::string("no plugins were found; `wanfw plugins` shows where it looked")
                                         : fmt::format("found: {}", fmt::join(names, ", "))));
  }
  return kSuccess;
}

int config_reference_command(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  const auto extra = plugin_path_flags(args, &rest, kConfigReferenceHelp);
  if (!rest.empty()) usage_error(fmt::format("unexpected argument '{}'", rest.front()), kConfigReferenceHelp);
  std::fputs(configuration_reference(PluginHost(PluginHost::search_path(extra))).c_str(), stdout);
  return kSuccess;
}

}  // namespace wanfw::cli
