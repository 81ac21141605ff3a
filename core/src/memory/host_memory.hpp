#pragma once
// The host memory a process may still take, and the refusal of a run that would need more: read
// from the kernel (MemAvailable in /proc/meminfo) and, inside a container, its cgroup's limit.

#include <optional>
#include <string>

namespace wanfw {

struct AvailableHostMemory {
  double bytes = 0;
  std::string source;  ///< "MemAvailable" or "the cgroup's memory.max less its memory.current"
};

/// The smaller of MemAvailable and, under a cgroup (v2) with a memory limit, that limit less what
/// the cgroup uses; nullopt where neither can be read.
std::optional<AvailableHostMemory> available_host_memory();

/// MemAvailable's bytes in the text of /proc/meminfo; nullopt without the line.
std::optional<double> meminfo_available_bytes(const std::string& meminfo);

/// Throws wanfw::Error when `processes` processes of this host, each taking `bytes` for `what`,
/// would not fit the host memory available now, naming both figures; `fix` is what to do.
void require_host_memory(double bytes, int processes, const std::string& what, const std::string& fix);

}  // namespace wanfw
