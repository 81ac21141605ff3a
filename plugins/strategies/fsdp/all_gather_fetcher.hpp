#pragma once
// The fsdp strategy's wanfw::UnitFetcher: the UnitRuntime (wanfw/unit_runtime.hpp) runs the model's
// units through it. A unit's flat shards are all-gathered before its forward and again before its
// backward, released after each; one unit's gather runs ahead, in the recorded order of use; after a
// unit's backward its parameters' gradients are reduce-scattered into gradients of its shards.

#include <cstddef>
#include <optional>
#include <vector>

#include "unit_shards.hpp"
#include "wanfw/unit_runtime.hpp"

namespace wanfw_fsdp {

struct RunnerSettings {
  /// The dtype parameters are gathered and computed in; none: each parameter's own.
  std::optional<at::ScalarType> compute;
  at::ScalarType reduce = at::kFloat;  ///< the dtype gradients are reduce-scattered in
  bool prefetch = true;
};

class AllGatherFetcher final : public wanfw::UnitFetcher {
 public:
  AllGatherFetcher(std::vector<UnitShards>& units, RunnerSettings settings) : units_(units), settings_(settings) {}

  wanfw::UnitState state(std::size_t unit) const override;
  /// Starts the gather of `unit` while no other gather is under way (one unit ahead).
  bool prefetch(std::size_t unit, const std::vector<wanfw::UnitUse>& upcoming) override;
  void acquire(std::size_t unit, const std::vector<wanfw::UnitUse>& upcoming) override;
  void release(std::size_t unit) override;
  void after_backward(std::size_t unit) override;
  bool trains(std::size_t unit) const override { return !units_.at(unit).trainable_shards().empty(); }
  /// Every gather and reduce-scatter is a collective: the ranks run the same units in the same order.
  bool collective() const override { return true; }

  /// While held (evaluation), every unit stays gathered: the main process alone may then run the
  /// model (previews) without collectives.
  void hold(bool held) { held_ = held; }
  /// A micro-batch is over: every unit released.
  void release_all();

 private:
  std::vector<UnitShards>& units_;
  RunnerSettings settings_;
  bool held_ = false;
};

}  // namespace wanfw_fsdp
