#pragma once
// The causal cache of a Wan VAE pass, one video at a time: the VAE runs one latent frame (decode)
// or one chunk of frames (encode) per call, and each causal convolution keeps the last frames of
// its input for the next call. Slots are taken in forward order, one per cached convolution; a
// temporal upsample's slot is first "Rep" (its first chunk adds no frames, and its next chunk's
// time convolution sees zeros instead of that chunk's features).

#include <cstddef>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wan {

class FeatureCache {
 public:
  struct Slot {
    enum class Kind { Empty, Rep, Frames } kind = Kind::Empty;
    at::Tensor frames;  ///< Kind::Frames: the last frames of the convolution's input
  };

  /// A new chunk: slots are taken from the first again.
  void start_chunk() { next_ = 0; }
  /// The next slot in forward order.
  Slot& next() {
    if (next_ == slots_.size()) slots_.emplace_back();
    return slots_[next_++];
  }
  std::size_t size() const { return slots_.size(); }

 private:
  std::vector<Slot> slots_;
  std::size_t next_ = 0;
};

}  // namespace wan
