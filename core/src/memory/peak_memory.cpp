#include "memory/peak_memory.hpp"

#include <sys/resource.h>

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

namespace wanfw {

namespace {

/// The allocator's index of a CUDA device; "cuda" with no index is the current one.
c10::DeviceIndex gpu_index(const c10::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

/// The caching allocator's statistics of `device`, all pools together.
auto gpu_stats(const c10::Device& device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(gpu_index(device));
}

constexpr auto kAll = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

double peak_memory_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

double peak_gpu_memory_mib(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  return static_cast<double>(gpu_stats(device).allocated_bytes[kAll].peak) / kMiB;
}

double gpu_memory_mib(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  return static_cast<double>(gpu_stats(device).allocated_bytes[kAll].current) / kMiB;
}

void reset_gpu_peaks(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(gpu_index(device));
}

double peak_gpu_reserved_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  return static_cast<double>(gpu_stats(device).reserved_bytes[kAll].peak);
}

}  // namespace wanfw
