// Copies from a GPU into pinned host memory on a copy stream of their own (wanfw::HostCopies): each
// after an event recorded on the source's current stream, the source's memory kept from reuse by
// the caching allocator until the copy stream has read it.

#include <optional>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "wanfw/parallel/host_arena.hpp"

namespace wanfw {

struct HostCopies::Stream {
  explicit Stream(c10::DeviceIndex device)
      : device(device), copies(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}
  c10::DeviceIndex device;
  c10::cuda::CUDAStream copies;
};

HostCopies::HostCopies() = default;
HostCopies::~HostCopies() {
  if (pending_) stream_->copies.synchronize();  // the targets outlive the copies into them
}

void HostCopies::copy(const at::Tensor& target, const at::Tensor& source) {
  if (!source.is_cuda() || !target.is_pinned()) {
    target.copy_(source);
    return;
  }
  const c10::cuda::CUDAGuard guard(source.device());
  if (!stream_ || stream_->device != source.device().index())
    stream_ = std::make_unique<Stream>(source.device().index());
  at::cuda::CUDAEvent computed;
  computed.record(c10::cuda::getCurrentCUDAStream(source.device().index()));
  computed.block(stream_->copies);
  {
    const c10::cuda::CUDAStreamGuard on_copies(stream_->copies);
    target.copy_(source, /*non_blocking=*/true);
  }
  c10::cuda::CUDACachingAllocator::recordStream(source.storage().data_ptr(), stream_->copies);
  pending_ = true;
  ++queued_;
}

void HostCopies::wait() {
  if (!pending_) return;
  stream_->copies.synchronize();
  pending_ = false;
}

}  // namespace wanfw
