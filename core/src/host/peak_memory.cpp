#include "host/peak_memory.hpp"

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

}  // namespace

double peak_memory_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

double peak_gpu_memory_mib(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(gpu_index(device));
  const auto aggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return static_cast<double>(stats.allocated_bytes[aggregate].peak) / (1024.0 * 1024.0);
}

double gpu_memory_mib(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(gpu_index(device));
  const auto aggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return static_cast<double>(stats.allocated_bytes[aggregate].current) / (1024.0 * 1024.0);
}

void reset_gpu_peaks(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(gpu_index(device));
}

double peak_gpu_reserved_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(gpu_index(device));
  const auto aggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return static_cast<double>(stats.reserved_bytes[aggregate].peak);
}

}  // namespace wanfw
