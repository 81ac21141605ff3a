#pragma once
// The host memory block swap keeps the streamed units' frozen weights in: one allocation (pinned
// where it can be, exactly the bytes asked for: no per-tensor rounding), cut into per-unit views.

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace wanfw {

/// Where the host copies live: pinned when the device is a GPU and pinning works, else pageable
/// (auto); pinned (refuse to run without); pageable.
enum class HostMemory { Auto, Pinned, Pageable };

HostMemory parse_host_memory(const std::string& name);

struct HostArena {
  at::Tensor bytes;  ///< uint8 on the CPU
  bool pinned = false;
  std::string note;  ///< what was allocated, and why pageable when it is
};

/// Page-locked host bytes from the CUDA runtime, exactly `bytes` (the caching host allocator rounds
/// each block up to a power of two); an undefined tensor, and the reason in `why`, when that fails.
at::Tensor pin_host_bytes(std::int64_t bytes, std::string& why);

/// `bytes` of host memory for a run on `device`. Throws wanfw::Error when `mode` is Pinned and
/// pinning fails.
HostArena allocate_host_arena(std::int64_t bytes, HostMemory mode, c10::Device device);

}  // namespace wanfw
