#include "wanfw/parallel/host_arena.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#ifdef WANFW_CUDA_RUNTIME
#include <cuda_runtime_api.h>
#endif

#include "wanfw/error.hpp"

namespace wanfw {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

at::Tensor pin_host_bytes(std::int64_t bytes, std::string& why) {
#ifdef WANFW_CUDA_RUNTIME
  void* data = nullptr;
  const cudaError_t status = cudaHostAlloc(&data, static_cast<std::size_t>(bytes), cudaHostAllocPortable);
  if (status != cudaSuccess) {
    why = cudaGetErrorString(status);
    (void)cudaGetLastError();  // clear it
    return {};
  }
  return at::from_blob(data, {bytes}, [](void* p) { cudaFreeHost(p); }, at::TensorOptions().dtype(at::kByte));
#else
  why = "this build has no CUDA runtime";
  return {};
#endif
}

std::int64_t arena_slot_bytes(std::int64_t numel, at::ScalarType dtype) {
  return round_up(numel * static_cast<std::int64_t>(c10::elementSize(dtype)), kArenaLine);
}

at::Tensor arena_tensor(const HostArena& arena, std::int64_t offset, at::IntArrayRef shape, at::ScalarType dtype) {
  return at::from_blob(static_cast<std::uint8_t*>(arena.bytes.data_ptr()) + offset, shape, [](void*) {},
                       at::TensorOptions().dtype(dtype));
}

HostMemory parse_host_memory(const std::string& name) {
  if (name == "pinned") return HostMemory::Pinned;
  if (name == "pageable") return HostMemory::Pageable;
  return HostMemory::Auto;
}

HostArena allocate_host_arena(std::int64_t bytes, HostMemory mode, c10::Device device, const HostArenaOwner& owner) {
  HostArena arena;
  const double gib = static_cast<double>(bytes) / kGiB;
  if (device.is_cuda() && mode != HostMemory::Pageable) {
    std::string why;
    arena.bytes = pin_host_bytes(bytes, why);
    if (arena.bytes.defined()) {
      arena.pinned = true;
      arena.note = fmt::format("{:.2f} GiB of pinned host memory", gib);
      return arena;
    }
    if (mode == HostMemory::Pinned)
      throw Error(fmt::format("{}: pinning {:.2f} GiB of host memory failed: {}", owner.name, gib, why),
                  fmt::format("free host memory, or set {} (slower: every copy is staged through a small pinned "
                              "buffer; WSL and Windows cap pinned memory)",
                              owner.pageable_setting));
    arena.note = fmt::format("{:.2f} GiB of pageable host memory (pinning it failed: {})", gib, why);
  } else {
    arena.note = fmt::format("{:.2f} GiB of {} host memory", gib, device.is_cuda() ? "pageable" : "CPU");
  }
  arena.bytes = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
  return arena;
}

}  // namespace wanfw
