#pragma once
// Internal: reads a plugin library as a file, before anything loads it. The ELF header, the
// program headers and every loadable segment are checked to lie inside the file (a truncated
// copy would otherwise crash the dynamic loader), and the plugin's exported
// `wanfw_plugin_record` is read from the bytes on disk, so that a plugin built for another ABI
// or LibTorch is refused without running any of its code.

#include <filesystem>

#include "wanfw/plugin.hpp"

namespace wanfw {

/// The record `path` exports. Throws PluginError naming the file and what is wrong: not an ELF
/// shared library, built for another machine, truncated or malformed, or no wanfw plugin record.
PluginRecord read_plugin_record(const std::filesystem::path& path);

}  // namespace wanfw
