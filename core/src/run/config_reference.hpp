#pragma once
// The configuration reference (`wanfw config-reference`, docs/configuration.md).

#include <string>

namespace wanfw {

class PluginHost;
/// Markdown reference of every core config section and every plugin `host` found, generated
/// from the same schemas the config is validated against (docs/configuration.md embeds it).
std::string configuration_reference(const PluginHost& host);

}  // namespace wanfw
