#include "memory/host_memory.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wanfw {

namespace {

constexpr double kGibibyte = 1024.0 * 1024.0 * 1024.0;

std::optional<std::string> read_text(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A cgroup v2 file holding one number ("max": none).
std::optional<double> cgroup_number(const char* path) {
  const auto text = read_text(path);
  if (!text || text->starts_with("max")) return std::nullopt;
  try {
    return std::stod(*text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::optional<double> meminfo_available_bytes(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  std::string key, unit;
  double value = 0;
  while (lines >> key >> value) {
    std::getline(lines, unit);
    if (key == "MemAvailable:") return value * (unit.find("kB") != std::string::npos ? 1024.0 : 1.0);
  }
  return std::nullopt;
}

std::optional<AvailableHostMemory> available_host_memory() {
  std::optional<AvailableHostMemory> out;
  if (const auto meminfo = read_text("/proc/meminfo"))
    if (const auto bytes = meminfo_available_bytes(*meminfo)) out = AvailableHostMemory{*bytes, "MemAvailable"};
  const auto limit = cgroup_number("/sys/fs/cgroup/memory.max");
  const auto used = cgroup_number("/sys/fs/cgroup/memory.current");
  if (limit && used && (!out || *limit - *used < out->bytes))
    out = AvailableHostMemory{std::max(0.0, *limit - *used), "the cgroup's memory.max less its memory.current"};
  return out;
}

void require_host_memory(double bytes, int processes, const std::string& what, const std::string& fix) {
  const auto available = available_host_memory();
  const double needed = bytes * std::max(1, processes);
  if (!available || needed <= available->bytes) return;
  throw Error(fmt::format("{} needs {:.2f} GiB of host memory{} and this machine has {:.2f} GiB available ({})", what,
                          needed / kGibibyte,
                          processes > 1 ? fmt::format(" ({} processes of this host, {:.2f} GiB each)", processes,
                                                      bytes / kGibibyte)
                                        : std::string(),
                          available->bytes / kGibibyte, available->source),
              fix);
}

}  // namespace wanfw
