#include "memory/cpu_memory_cache.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <spdlog/spdlog.h>

namespace wanfw {

namespace {

class CpuMemoryCache final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) override {
    if (bytes < min_block_bytes_) return fallback_->allocate(bytes);
    {
      std::lock_guard lock(mutex_);
      if (auto it = free_.find(bytes); it != free_.end() && !it->second.empty()) {  // a hit: one lock
        void* data = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= bytes;
        ++stats_.hits;
        sizes_[data] = bytes;
        return {data, data, &CpuMemoryCache::release, c10::Device(c10::DeviceType::CPU)};
      }
      ++stats_.misses;
    }
    void* data = c10::alloc_cpu(bytes);  // outside the lock: the system allocator may fault pages in
    {
      std::lock_guard lock(mutex_);
      sizes_[data] = bytes;
    }
    return {data, data, &CpuMemoryCache::release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CpuMemoryCache::release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  void set_limits(std::size_t max_cached_bytes, std::size_t min_block_bytes) {
    std::lock_guard lock(mutex_);
    max_cached_bytes_ = max_cached_bytes;
    min_block_bytes_ = min_block_bytes;
    trim_locked(max_cached_bytes_);
  }

  void clear() {
    std::lock_guard lock(mutex_);
    trim_locked(0);
  }

  CpuMemoryCacheStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  static CpuMemoryCache& instance() {
    // Never destroyed: tensors freed during static destruction still find it.
    static auto* cache = new CpuMemoryCache();
    return *cache;
  }

 private:
  CpuMemoryCache() : fallback_(c10::GetDefaultCPUAllocator()) {}

  static void release(void* data) { instance().free_block(data); }

  void free_block(void* data) {
    {
      std::lock_guard lock(mutex_);
      auto it = sizes_.find(data);
      if (it == sizes_.end()) {  // a small block of the system allocator's, freed through raw_deleter()
        c10::free_cpu(data);
        return;
      }
      const std::size_t bytes = it->second;
      sizes_.erase(it);
      if (stats_.cached_bytes + bytes <= max_cached_bytes_) {
        free_[bytes].push_back(data);
        stats_.cached_bytes += bytes;
        if (stats_.cached_bytes > stats_.peak_cached_bytes) stats_.peak_cached_bytes = stats_.cached_bytes;
        return;
      }
    }
    c10::free_cpu(data);
  }

  void trim_locked(std::size_t limit) {
    for (auto& [bytes, blocks] : free_)
      while (stats_.cached_bytes > limit && !blocks.empty()) {
        c10::free_cpu(blocks.back());
        blocks.pop_back();
        stats_.cached_bytes -= bytes;
      }
  }

  c10::Allocator* fallback_;
  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::unordered_map<void*, std::size_t> sizes_;
  std::size_t max_cached_bytes_ = 0;
  std::atomic<std::size_t> min_block_bytes_{64 * 1024};  // read without the lock
  CpuMemoryCacheStats stats_;
};

}  // namespace

void install_cpu_memory_cache(std::size_t max_cached_bytes, std::size_t min_block_bytes) {
  CpuMemoryCache& cache = CpuMemoryCache::instance();
  cache.set_limits(max_cached_bytes, min_block_bytes);
  c10::SetCPUAllocator(&cache, /*priority=*/1);
}

void release_cpu_memory_cache() { CpuMemoryCache::instance().clear(); }

CpuMemoryCacheStats cpu_memory_cache_stats() { return CpuMemoryCache::instance().stats(); }

CpuMemoryCacheScope::CpuMemoryCacheScope(const c10::Device& device, std::int64_t max_cached_mib)
    : active_(device.is_cpu() && max_cached_mib > 0) {
  if (!active_) return;
  install_cpu_memory_cache(static_cast<std::size_t>(max_cached_mib) << 20);
  before_ = cpu_memory_cache_stats();
}

CpuMemoryCacheScope::~CpuMemoryCacheScope() {
  if (!active_) return;
  const CpuMemoryCacheStats now = cpu_memory_cache_stats();
  const std::uint64_t hits = now.hits - before_.hits, misses = now.misses - before_.misses;
  spdlog::debug(
      "CPU memory cache: {} of {} allocations of 64 KiB or more reused a freed block; {:.1f} MiB held at "
      "most",
      hits, hits + misses, static_cast<double>(now.peak_cached_bytes) / (1 << 20));
}

}  // namespace wanfw
