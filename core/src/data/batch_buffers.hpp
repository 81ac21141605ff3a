#pragma once
// Internal: the memory batches are assembled in, recycled.
//
// A 5B-shaped batch is tens of megabytes; fresh memory for every batch costs a page fault per
// 4 KiB (the kernel zeroes each page) — more than copying the samples into it. Batch tensors
// made here return their memory to the pool when the last reference to them dies (on whichever
// thread), and the next batch of a similar size reuses it. Pinned batches (CUDA) come from the
// CUDA caching host allocator instead, which recycles pinned blocks itself and knows when an
// asynchronous copy out of one has finished.

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include <ATen/core/Tensor.h>

namespace wanfw {

class BatchBuffers : public std::enable_shared_from_this<BatchBuffers> {
 public:
  /// Keeps at most `keep` idle buffers (the batches in flight: workers x prefetch x fields, and a few).
  static std::shared_ptr<BatchBuffers> make(std::size_t keep);
  ~BatchBuffers();
  BatchBuffers(const BatchBuffers&) = delete;
  BatchBuffers& operator=(const BatchBuffers&) = delete;

  /// An uninitialised CPU tensor whose memory comes back here when it is freed; with `pin`, a
  /// pinned one from the CUDA host allocator.
  at::Tensor empty(at::IntArrayRef shape, at::ScalarType dtype, bool pin);

  /// Buffers allocated and reused so far (tests and benchmarks).
  std::size_t allocated() const;
  std::size_t reused() const;

 private:
  explicit BatchBuffers(std::size_t keep) : keep_(keep) {}
  void give_back(void* data, std::size_t capacity);
  std::size_t keep_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> idle_;  ///< by capacity
  std::size_t allocated_ = 0, reused_ = 0;
};

}  // namespace wanfw
