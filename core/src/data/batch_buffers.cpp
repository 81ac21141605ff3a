#include "data/batch_buffers.hpp"

#include <ATen/ATen.h>
#include <c10/core/impl/alloc_cpu.h>

namespace wanfw {

std::shared_ptr<BatchBuffers> BatchBuffers::make(std::size_t keep) {
  return std::shared_ptr<BatchBuffers>(new BatchBuffers(keep));
}

BatchBuffers::~BatchBuffers() {
  for (const auto& [capacity, data] : idle_) c10::free_cpu(data);
}

at::Tensor BatchBuffers::empty(at::IntArrayRef shape, at::ScalarType dtype, bool pin) {
  const auto options = at::TensorOptions().dtype(dtype);
  if (pin) return at::empty(shape, options.pinned_memory(true));
  std::size_t bytes = c10::elementSize(dtype);
  for (const auto size : shape) bytes *= static_cast<std::size_t>(size);
  if (bytes == 0) return at::empty(shape, options);
  void* data = nullptr;
  std::size_t capacity = 0;
  {
    // Best fit among idle buffers up to 1.5x the size (text padding varies from batch to batch).
    std::lock_guard<std::mutex> lock(mutex_);
    const auto fit = idle_.lower_bound(bytes);
    if (fit != idle_.end() && fit->first <= bytes + bytes / 2) {
      capacity = fit->first;
      data = fit->second;
      idle_.erase(fit);
      ++reused_;
    }
  }
  if (data == nullptr) {
    capacity = bytes + bytes / 8;  // room for a batch with a little more text
    data = c10::alloc_cpu(capacity);
    std::lock_guard<std::mutex> lock(mutex_);
    ++allocated_;
  }
  std::weak_ptr<BatchBuffers> pool = weak_from_this();
  return at::from_blob(
      data, shape,
      [pool, capacity](void* freed) {
        if (auto owner = pool.lock()) owner->give_back(freed, capacity);
        else c10::free_cpu(freed);
      },
      options);
}

void BatchBuffers::give_back(void* data, std::size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.emplace(capacity, data);
  while (idle_.size() > keep_) {  // the smallest go first: large batches are the costly ones
    c10::free_cpu(idle_.begin()->second);
    idle_.erase(idle_.begin());
  }
}

std::size_t BatchBuffers::allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

std::size_t BatchBuffers::reused() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reused_;
}

}  // namespace wanfw
