#include <torch/torch.h>

#include "memory/cpu_memory_cache.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {
constexpr std::size_t kMiB = 1 << 20;
}  // namespace

TEST_CASE("the CPU memory cache hands a freed block back to the next allocation of its size") {
  wanfw::install_cpu_memory_cache(64 * kMiB);
  wanfw::release_cpu_memory_cache();
  const wanfw::CpuMemoryCacheStats before = wanfw::cpu_memory_cache_stats();
  void* first = nullptr;
  {
    const torch::Tensor t = torch::full({1000, 1000}, 3.0f);  // 4 MB
    first = t.data_ptr();
  }
  CHECK(wanfw::cpu_memory_cache_stats().cached_bytes == 4'000'000);
  const torch::Tensor again = torch::zeros({1000, 1000});
  CHECK(again.data_ptr() == first);
  CHECK(again.sum().item<float>() == 0.0f);  // the reused block holds what the new tensor wrote
  const wanfw::CpuMemoryCacheStats after = wanfw::cpu_memory_cache_stats();
  CHECK(after.hits == before.hits + 1);
  CHECK(after.cached_bytes == 0);
}

TEST_CASE("the CPU memory cache keeps no more freed memory than its limit") {
  wanfw::install_cpu_memory_cache(5 * kMiB);
  wanfw::release_cpu_memory_cache();
  {
    const torch::Tensor a = torch::ones({1 << 20}), b = torch::ones({1 << 20});  // 4 MiB each
  }
  CHECK(wanfw::cpu_memory_cache_stats().cached_bytes == 4 * kMiB);
  wanfw::release_cpu_memory_cache();
  CHECK(wanfw::cpu_memory_cache_stats().cached_bytes == 0);
  wanfw::install_cpu_memory_cache(64 * kMiB);
}

TEST_CASE("the CPU memory cache leaves allocations under 64 KiB to the system allocator") {
  wanfw::install_cpu_memory_cache(64 * kMiB);
  const wanfw::CpuMemoryCacheStats before = wanfw::cpu_memory_cache_stats();
  { const torch::Tensor small = torch::ones({1000}); }
  const wanfw::CpuMemoryCacheStats after = wanfw::cpu_memory_cache_stats();
  CHECK(after.hits + after.misses == before.hits + before.misses);
  CHECK(after.cached_bytes == before.cached_bytes);
}
