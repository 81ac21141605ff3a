#include "wanfw/version.hpp"

#include <ATen/Version.h>

namespace wanfw {

std::uint32_t host_plugin_abi_version() { return WANFW_PLUGIN_ABI_VERSION; }
std::string host_torch_version() { return WANFW_TORCH_VERSION_STRING; }
std::string version() { return WANFW_VERSION_STRING; }
std::string host_cpu_vector_unit() { return at::get_cpu_capability(); }

}  // namespace wanfw
