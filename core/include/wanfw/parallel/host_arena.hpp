#pragma once
// Host memory that crosses to a GPU: one allocation (pinned where it can be, exactly the bytes asked
// for: no per-tensor rounding), cut into views by its owner. Block swap keeps the streamed units'
// frozen weights in one; optimizer.state host keeps the fp32 masters and their gradients in one (a
// strategy that shards the state, its shards and their gradients).

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
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

/// `bytes` rounded up to a multiple of `alignment`: where the next view cut from an arena starts.
constexpr std::int64_t round_up(std::int64_t bytes, std::int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

/// Views cut from an arena start on 64-byte lines, as a fresh CPU tensor's data does: the host's
/// kernels then split them as they split any tensor's.
constexpr std::int64_t kArenaLine = 64;

/// An arena's bytes for `numel` values of `dtype`: a whole number of lines.
std::int64_t arena_slot_bytes(std::int64_t numel, at::ScalarType dtype);

/// A tensor of `shape` and `dtype` over `arena`'s bytes at `offset`: a tensor of its own, not a view
/// (an optimizer detaches and resets gradients in place, which a view refuses); the arena must
/// outlive it.
at::Tensor arena_tensor(const HostArena& arena, std::int64_t offset, at::IntArrayRef shape, at::ScalarType dtype);

/// Page-locked host bytes from the CUDA runtime, exactly `bytes` (the caching host allocator rounds
/// each block up to a power of two); an undefined tensor, and the reason in `why`, when that fails.
at::Tensor pin_host_bytes(std::int64_t bytes, std::string& why);

/// Who asks for an arena, for its errors: "block swap" and the option that allows pageable memory.
struct HostArenaOwner {
  std::string name;
  std::string pageable_setting;  ///< e.g. "block_swap.host_memory: pageable"
};

/// `bytes` of host memory for a run on `device`. Throws wanfw::Error when `mode` is Pinned and
/// pinning fails.
HostArena allocate_host_arena(std::int64_t bytes, HostMemory mode, c10::Device device, const HostArenaOwner& owner);

/// Copies from a GPU into pinned host memory on a stream of their own, so that the compute goes on
/// while they cross the bus: each starts once the work queued so far on the source's current stream
/// (the gradient's computation, a reduction) is done, and the device memory it reads is not reused
/// until it is over, even when the caller releases the tensor at once. wait() returns when every
/// copy made since the last wait is over. Into pageable memory, or from the CPU, a copy is made at
/// once.
class HostCopies {
 public:
  HostCopies();
  ~HostCopies();
  HostCopies(const HostCopies&) = delete;
  HostCopies& operator=(const HostCopies&) = delete;

  /// `target` (host memory) = `source` (any device; converted to target's dtype on the way).
  void copy(const at::Tensor& target, const at::Tensor& source);
  /// The host may read every target copied into since the last wait.
  void wait();
  /// Copies made on the copy stream since this was built (on the CPU: none).
  std::int64_t queued() const { return queued_; }

 private:
  struct Stream;  ///< the CUDA copy stream, made at the first copy from a GPU
  std::unique_ptr<Stream> stream_;
  std::int64_t queued_ = 0;
  bool pending_ = false;
};

}  // namespace wanfw
