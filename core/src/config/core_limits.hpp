#pragma once
// Internal: the bounds of the core's integer options, shared by their schemas (which document
// them) and the settings reader (which enforces them).

#include <cstdint>

namespace wanfw::limits {
inline constexpr std::int64_t kMaxWorkers = 256;  ///< data.workers: threads that make batches
inline constexpr std::int64_t kMaxEpochs = 1'000'000;
inline constexpr std::int64_t kMaxPrefetch = 64;  ///< data.prefetch: batches made ahead per worker
inline constexpr std::int64_t kMaxCpuMemoryCacheMib = 1 << 20;  ///< trainer.cpu_memory_cache_mb: 1 TiB
}  // namespace wanfw::limits
