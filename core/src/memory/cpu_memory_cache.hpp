#pragma once

#include <cstddef>
#include <cstdint>

#include <c10/core/Device.h>

namespace wanfw {

/// What the CPU block cache holds and has done since it was installed.
struct CpuMemoryCacheStats {
  std::size_t cached_bytes = 0;       ///< freed blocks kept for reuse, now
  std::size_t peak_cached_bytes = 0;  ///< the most it held at once
  std::uint64_t hits = 0;             ///< allocations served from the cache
  std::uint64_t misses = 0;           ///< allocations of cacheable size the system served
};

/// Makes LibTorch's CPU allocations of `min_block_bytes` or more reuse freed blocks of the same
/// size instead of returning them to the C library (which hands large blocks back to the kernel,
/// so every training step faults its activations' pages in again). At most `max_cached_bytes` of
/// freed blocks are kept; smaller allocations go to the system allocator as before. Installed
/// once per process (later calls change the limits); tensors allocated before it stay valid.
void install_cpu_memory_cache(std::size_t max_cached_bytes, std::size_t min_block_bytes = 64 * 1024);

/// Frees every cached block (the cache stays installed).
void release_cpu_memory_cache();

CpuMemoryCacheStats cpu_memory_cache_stats();

/// A training run's use of the cache: installs it for a run on the CPU with `max_cached_mib` > 0,
/// and says at the end (debug log) how often it served an allocation. Other runs: does nothing.
class CpuMemoryCacheScope {
 public:
  CpuMemoryCacheScope(const c10::Device& device, std::int64_t max_cached_mib);
  ~CpuMemoryCacheScope();
  CpuMemoryCacheScope(const CpuMemoryCacheScope&) = delete;
  CpuMemoryCacheScope& operator=(const CpuMemoryCacheScope&) = delete;

 private:
  bool active_ = false;
  CpuMemoryCacheStats before_;
};

}  // namespace wanfw
