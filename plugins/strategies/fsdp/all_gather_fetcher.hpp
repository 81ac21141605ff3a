#pragma once
// The fsdp strategy's wanfw::UnitFetcher: the UnitRuntime (wanfw/parallel/unit_runtime.hpp) runs the model's
// units through it. A unit's flat shards are all-gathered before its forward and again before its
// backward, released after each; one unit's gather runs ahead, in the recorded order of use; after a
// unit's backward its parameters' gradients are reduce-scattered into gradients of its shards.
// The parameters in no unit ("the rest": embeddings, head) are the runtime's root unit (index
// units.size()): held for a whole micro-step (UnitRuntime::begin_step .. end_step), gathered when
// it begins, reduce-scattered and released when its backward is over, as FSDP2 keeps its root's
// parameters between forward and backward. A unit's life cycle is the runtime's record; the flat
// shards keep only their buffers.

#include <cstddef>
#include <optional>
#include <vector>

#include "unit_shards.hpp"
#include "wanfw/parallel/unit_runtime.hpp"

namespace wanfw_fsdp {

struct RunnerSettings {
  /// The dtype parameters are gathered and computed in; none: each parameter's own.
  std::optional<at::ScalarType> compute;
  at::ScalarType reduce = at::kFloat;  ///< the dtype gradients are reduce-scattered in
  bool prefetch = true;
};

class AllGatherFetcher final : public wanfw::UnitFetcher {
 public:
  AllGatherFetcher(std::vector<UnitShards>& units, UnitShards& rest, RunnerSettings settings)
      : units_(units), rest_(rest), settings_(settings) {}

  /// Starts the gather of `unit` while no other gather is under way (one unit ahead).
  bool prefetch(std::size_t unit, const std::vector<wanfw::UnitUse>& upcoming) override;
  void acquire(std::size_t unit, const std::vector<wanfw::UnitUse>& upcoming) override;
  /// Frees the unit's gathered parameters (evicted).
  void release(std::size_t unit) override;
  void after_backward(std::size_t unit) override;
  bool trains(std::size_t unit) const override { return !shards(unit).trainable_shards().empty(); }
  /// Every gather and reduce-scatter is a collective: the ranks run the same units in the same order.
  bool collective() const override { return true; }
  bool fetches_root() const override { return true; }
  /// A gather holds the shards' values before the optimizer step: the next step gathers anew.
  bool stale_after_step() const override { return true; }
  /// optimizer.state host: the copies that take the gradients reduced from now on to the host as
  /// each unit's are (the step's last micro-batch); null: they accumulate on the device.
  void set_gradients_to_host(wanfw::HostCopies* to_host) { gradients_to_host_ = to_host; }

 private:
  /// A unit's shards; units.size() is the rest (the root).
  UnitShards& shards(std::size_t unit) const;

  std::vector<UnitShards>& units_;
  UnitShards& rest_;
  RunnerSettings settings_;
  wanfw::HostCopies* gradients_to_host_ = nullptr;
};

}  // namespace wanfw_fsdp
