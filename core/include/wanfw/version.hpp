#pragma once
// Versions the plugin host compares before it accepts a plugin.

#include <cstdint>
#include <string>

#include <torch/version.h>

#define WANFW_VERSION_STRING "0.1.0"  // keep equal to project(VERSION) in CMakeLists.txt

/// The plugin ABI: bumped whenever anything a plugin compiles against in the SDK headers changes
/// layout, virtual table or meaning (docs/plugins.md lists what counts). A plugin records the
/// value it was compiled with in its PluginRecord; the host refuses any other.
#ifndef WANFW_PLUGIN_ABI_VERSION
#define WANFW_PLUGIN_ABI_VERSION 25
#endif

/// The LibTorch version a plugin was compiled against ("2.15.0").
#ifndef WANFW_TORCH_VERSION_STRING
#define WANFW_TORCH_VERSION_STRING TORCH_VERSION
#endif

namespace wanfw {

/// The plugin ABI version of this host.
std::uint32_t host_plugin_abi_version();
/// The LibTorch version this host was built with.
std::string host_torch_version();
/// wanfw's own version.
std::string version();
/// The CPU vector unit LibTorch's kernels use in this process ("AVX512", "AVX2", "DEFAULT"):
/// the machine's best, or what ATEN_CPU_CAPABILITY holds it to. Float results differ between
/// units in their rounding.
std::string host_cpu_vector_unit();

}  // namespace wanfw
