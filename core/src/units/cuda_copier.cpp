// The GPU's copier: each copy on a copy stream, after the event the compute stream recorded when it
// last read the slot; the compute stream waits on the copy's event. Pageable host memory (where
// pinning the arena failed) goes through one pinned staging buffer a slot: a worker thread copies
// the unit's bytes there once the slot's last copy out of it is done, then issues the asynchronous
// copy to the device, so neither the compute thread nor the copy stream waits on host memcpy. Where
// the staging buffers cannot be pinned either, the worker thread lets the driver stage the copy.

#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include "wanfw/parallel/host_arena.hpp"
#include "units/unit_copier.hpp"

namespace wanfw {

namespace {

class CudaCopier final : public UnitCopier {
 public:
  CudaCopier(std::size_t slots, c10::Device device, bool pinned_source, std::int64_t slot_bytes)
      : device_(device),
        pinned_(pinned_source),
        slot_bytes_(slot_bytes),
        copy_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        ready_(slots),
        free_(slots),
        free_recorded_(slots, false),
        pending_(slots) {
    if (pinned_) return;
    std::string why;
    const std::int64_t bytes = static_cast<std::int64_t>(slots) * slot_bytes;
    staging_ = pin_host_bytes(bytes, why);
    note_ = staging_.defined()
                ? fmt::format("copies staged through {} pinned buffer(s) of {:.1f} MiB", slots, slot_bytes / 1048576.0)
                : fmt::format("pinning {:.1f} MiB of staging buffers failed too ({}): the driver stages every copy",
                              bytes / 1048576.0, why);
  }

  void copy(std::size_t slot, const at::Tensor& source, const at::Tensor& target) override {
    const c10::cuda::CUDAGuard guard(device_);
    if (pinned_) {
      issue(slot, source, target);
      return;
    }
    if (pending_[slot].valid()) pending_[slot].get();  // the slot's last copy has been issued
    pending_[slot] = std::async(std::launch::async, [this, slot, source, target] {
      const c10::cuda::CUDAGuard inner(device_);
      if (!staging_.defined()) {  // the driver stages pageable bytes synchronously
        issue(slot, source, target);
        copy_stream_.synchronize();
        return;
      }
      const at::Tensor stage = staging_.narrow(0, static_cast<std::int64_t>(slot) * slot_bytes_, source.numel());
      ready_[slot].synchronize();  // the slot's last copy out of its staging buffer is done
      std::memcpy(stage.data_ptr(), source.data_ptr(), static_cast<std::size_t>(source.nbytes()));
      issue(slot, stage, target);
    });
  }

  std::string describe() const override { return note_; }

  void wait(std::size_t slot) override {
    const c10::cuda::CUDAGuard guard(device_);
    if (pending_[slot].valid()) pending_[slot].get();
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    auto before = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    auto after = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    before->record(compute);
    ready_[slot].block(compute);
    after->record(compute);
    stalls_.emplace_back(std::move(before), std::move(after));
    if (stalls_.size() >= 1024) stall_ += fold(stalls_.size() / 2);  // long done: no wait
  }

  void finish() override {
    const c10::cuda::CUDAGuard guard(device_);
    for (auto& pending : pending_)
      if (pending.valid()) pending.get();  // issued
    copy_stream_.synchronize();
  }

  void release(std::size_t slot) override {
    free_[slot].record(c10::cuda::getCurrentCUDAStream(device_.index()));
    free_recorded_[slot] = true;
  }

  double take_stall_seconds() override { return std::exchange(stall_, 0.0) + fold(stalls_.size()); }

 private:
  /// Seconds between the first `count` event pairs (each the compute stream's wait for a copy), dropped.
  double fold(std::size_t count) {
    double seconds = 0;
    for (std::size_t i = 0; i < count; ++i) {
      stalls_[i].second->synchronize();
      seconds += static_cast<double>(stalls_[i].first->elapsed_time(*stalls_[i].second)) / 1000.0;
    }
    stalls_.erase(stalls_.begin(), stalls_.begin() + static_cast<std::ptrdiff_t>(count));
    return seconds;
  }

  void issue(std::size_t slot, const at::Tensor& source, const at::Tensor& target) {
    const c10::cuda::CUDAStreamGuard on_copy_stream(copy_stream_);
    if (free_recorded_[slot]) free_[slot].block(copy_stream_);  // the slot's last reader is done
    target.copy_(source, /*non_blocking=*/true);
    ready_[slot].record(copy_stream_);
  }

  c10::Device device_;
  bool pinned_;
  std::int64_t slot_bytes_;
  at::Tensor staging_;  ///< pageable arena: one pinned buffer of slot_bytes_ a slot (undefined: none)
  std::string note_;
  c10::cuda::CUDAStream copy_stream_;
  std::vector<at::cuda::CUDAEvent> ready_, free_;
  std::vector<bool> free_recorded_;
  std::vector<std::future<void>> pending_;
  double stall_ = 0;
  std::vector<std::pair<std::unique_ptr<at::cuda::CUDAEvent>, std::unique_ptr<at::cuda::CUDAEvent>>> stalls_;
};

}  // namespace

std::unique_ptr<UnitCopier> make_cuda_copier(std::size_t slots, c10::Device device, bool pinned_source,
                                             std::int64_t slot_bytes) {
  return std::make_unique<CudaCopier>(slots, device, pinned_source, slot_bytes);
}

}  // namespace wanfw
