#pragma once

#include <c10/core/Device.h>

namespace wanfw {

/// The process's peak resident memory so far, in MiB.
double peak_memory_mib();

/// The peak of tensor memory LibTorch's caching allocator has handed out on `device`, in MiB;
/// 0 for a device that is not a GPU.
double peak_gpu_memory_mib(const c10::Device& device);

/// Tensor memory LibTorch's caching allocator has handed out on `device` now, in MiB; 0 off CUDA.
double gpu_memory_mib(const c10::Device& device);

/// Starts the peaks above anew from what is held now (torch.cuda.reset_peak_memory_stats); nothing
/// off CUDA.
void reset_gpu_peaks(const c10::Device& device);

/// The peak of memory LibTorch's caching allocator has reserved from the driver on `device` (what
/// torch.cuda.max_memory_reserved reports), in bytes; 0 off CUDA.
double peak_gpu_reserved_bytes(const c10::Device& device);

}  // namespace wanfw
