#pragma once
// Block swap: the frozen parameters of some of a model's units live in host memory and stream to
// the device into a ring of preallocated slots, ahead of use, in forward and in backward. A
// UnitFetcher for the UnitRuntime (wanfw/parallel/unit_runtime.hpp); the copies go through a UnitCopier.
//
// Host to device only: the host copy of a frozen weight is always valid, so leaving a slot costs
// nothing. The slots and their copies are block swap's; a unit's life cycle (fetching, ready, in
// use) is the runtime's record, read when a slot is chosen. A slot is taken for a unit when it is free or holds a unit whose next use comes after
// this one's (the recorded order says when); its copy waits for the compute that last read it.
// Trainable parameters of a streamed unit stay on the device, unless `trained` streams them too
// (optimizer.state host: their masters live on the host, and after each step the masters are
// written into their host copies, once invalidate() has let go of every slot's copy).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "wanfw/parallel/host_arena.hpp"
#include "units/unit_copier.hpp"
#include "wanfw/parallel/unit_runtime.hpp"

namespace wanfw {

struct BlockSwapSettings {
  std::int64_t blocks = 0;  ///< units streamed from host memory
  std::int64_t ring = 2;    ///< device slots they take turns in
  HostMemory host_memory = HostMemory::Auto;
  /// Stream the trainable parameters of the streamed units too (their masters elsewhere).
  bool trained = false;
};

class BlockSwap final : public UnitFetcher {
 public:
  /// Moves the frozen parameters of the streamed units of `module` (`units`, named as
  /// module.named_parameters() names them) into one host arena, 256-byte aligned, and binds each
  /// to an empty placeholder, so that placing the module on its device moves none of their bytes.
  /// Throws wanfw::Error when `settings` asks for more units than there are, or for none.
  BlockSwap(torch::nn::Module& module, const std::vector<Unit>& units, const BlockSwapSettings& settings,
            c10::Device device);
  ~BlockSwap() override;

  /// After the module is placed: the ring's slots on `device`, and the copier (default: CUDA streams
  /// on a GPU, a worker thread on the CPU).
  void start(c10::Device device, std::unique_ptr<UnitCopier> copier = nullptr);

  bool prefetch(std::size_t unit, const std::vector<UnitUse>& upcoming) override;
  void acquire(std::size_t unit, const std::vector<UnitUse>& upcoming) override;
  void release(std::size_t unit) override;
  bool trains(std::size_t unit) const override { return trains_.at(unit); }

  const std::vector<std::size_t>& streamed() const { return streamed_; }
  bool is_streamed(std::size_t unit) const { return plans_.at(unit).has_value(); }
  /// Unit copies into slots so far (each one unit's streamed bytes).
  std::int64_t copies() const { return copies_; }
  /// The host copy of parameter `index` of unit `unit` (its frozen ones in order), as a tensor of
  /// its dtype and shape.
  at::Tensor host_parameter(std::size_t unit, std::size_t index) const;
  /// The unit's streamed parameters (its frozen ones, and with `trained` its trainable ones).
  const std::vector<at::Tensor>& streamed_parameters(std::size_t unit) const;
  /// The host copy of a streamed parameter of the module (undefined for one that is not streamed).
  at::Tensor host_copy(const at::Tensor& parameter) const;
  /// The host copies are about to change (trained weights after a step): every slot lets go of its
  /// unit, waiting for a copy into it still under way; the next use copies anew. Call it while no
  /// unit is in use.
  void invalidate();
  /// Seconds the compute waited for copies since the last call.
  double take_stall_seconds() { return copier_ ? copier_->take_stall_seconds() : 0.0; }
  std::int64_t unit_bytes() const { return slot_bytes_; }
  std::string describe() const;
  /// "block swap: 1,234 copies (64 a step), the compute waited 3.1 ms a step for them" over `steps`.
  std::string summary(std::int64_t steps);

 private:
  struct Piece {
    std::int64_t offset = 0, bytes = 0;
    at::ScalarType dtype = at::kFloat;
    std::vector<std::int64_t> shape;
  };
  struct UnitPlan {
    std::vector<at::Tensor> parameters;  ///< the module's own tensors (rebound in place)
    std::vector<Piece> pieces;
    std::int64_t offset = 0, bytes = 0;  ///< its span of the arena
    std::optional<std::size_t> slot;     ///< the slot its bytes are in (or on their way to)
    bool check_kept = false;
    std::vector<std::size_t> use_counts;  ///< each parameter's, when acquired
  };
  /// A slot: a free one, or the one whose unit's next use is the latest (and after `not_before`, a
  /// position in `upcoming`, when given); none when every slot is busy. A prefetched unit not yet
  /// used keeps its slot unless `needed_now` (a unit the compute waits for: the order of use was
  /// not the one recorded, as when a model runs its networks in turns).
  std::optional<std::size_t> slot_for(const std::vector<UnitUse>& upcoming, std::optional<std::size_t> not_before,
                                      bool needed_now = false) const;
  void load(std::size_t unit, std::size_t slot);
  void bind(UnitPlan& plan, std::optional<std::size_t> slot);

  std::vector<std::optional<UnitPlan>> plans_;
  std::vector<bool> trains_;  ///< per unit: whether any of its parameters requires grad
  std::map<const void*, std::pair<std::size_t, std::size_t>> streamed_at_;  ///< parameter -> (unit, index)
  std::vector<std::size_t> streamed_;
  std::vector<std::string> names_;
  std::int64_t ring_ = 2;
  HostArena arena_;
  std::int64_t slot_bytes_ = 0;
  std::vector<at::Tensor> slots_;
  std::vector<std::optional<std::size_t>> slot_unit_;
  std::unique_ptr<UnitCopier> copier_;
  c10::Device device_{c10::kCPU};
  std::int64_t copies_ = 0;
};

}  // namespace wanfw
