#pragma once
// The fsdp strategy's wanfw::UnitRunner: each unit's parameters gathered just before its forward
// and again before its backward, released after each, the next unit's gather started ahead
// (prefetch), and the unit's parameter gradients reduce-scattered as its backward ends.

#include <cstddef>
#include <optional>
#include <vector>

#include "unit_shards.hpp"
#include "wanfw/sharded_units.hpp"

namespace wanfw_fsdp {

struct RunnerSettings {
  /// The dtype parameters are gathered and computed in; none: each parameter's own.
  std::optional<at::ScalarType> compute;
  at::ScalarType reduce = at::kFloat;  ///< the dtype gradients are reduce-scattered in
  bool prefetch = true;
};

class GatheringUnitRunner final : public wanfw::UnitRunner {
 public:
  GatheringUnitRunner(std::vector<UnitShards>& units, RunnerSettings settings) : units_(units), settings_(settings) {}

  /// A micro-batch starts.
  void begin_micro_step() { calls_.clear(); }
  /// The micro-batch's backward is over: every unit released.
  void end_micro_step();
  /// While held (evaluation), every unit stays gathered and run() only runs the body: the main
  /// process alone may then run the model (previews) without collectives.
  void hold(bool held) { held_ = held; }

  std::vector<at::Tensor> run(std::size_t unit, const std::vector<at::Tensor>& inputs, const Body& body) override;

  // For the unit's autograd function (gathering_unit_runner.cpp).
  /// Gathers the unit of call `call` and starts the gather of the call before it.
  void gather_for_backward(std::size_t call);
  /// Releases the unit of call `call` unless the call before it (the next backward) runs it too.
  void release_after_backward(std::size_t call);
  UnitShards& unit_of_call(std::size_t call) { return units_.at(calls_.at(call)); }
  at::ScalarType reduce_dtype() const { return settings_.reduce; }

 private:
  std::vector<UnitShards>& units_;
  RunnerSettings settings_;
  bool held_ = false;
  std::vector<std::size_t> calls_;  ///< the units run in this micro-batch, in order
};

}  // namespace wanfw_fsdp
