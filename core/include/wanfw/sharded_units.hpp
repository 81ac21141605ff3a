#pragma once
// A model's units for fully sharded training: the groups of parameters a strategy that shards
// them (fsdp) gathers whole together, just before they are used, and frees right after.
//
// A model declares its units (Model::shard_units) and runs each unit's forward through the runner
// the strategy hands it (Model::set_unit_runner):
//
//   std::vector<wanfw::ShardUnit> shard_units() override;   // {"blocks.0", {"blocks.0.q.weight", ...}}, ...
//   void set_unit_runner(wanfw::UnitRunner* runner) override { runner_ = runner; }
//   ...
//   x = wanfw::run_unit(runner_, i, {x, e}, [&](const std::vector<at::Tensor>& in) {
//         return std::vector<at::Tensor>{blocks[i]->forward(in[0], in[1])};
//       }).at(0);
//
// The runner gathers the unit's parameters (so the module's own tensors hold their whole values
// while `body` runs), runs `body`, and frees them; during backward it gathers them again, takes the
// gradients of the unit's parameters and reduce-scatters them, each rank keeping its shard's.
// Parameters in no unit are gathered for the whole step. A model without units trains under fsdp
// too: its parameters, gradients and optimizer state stay sharded between steps, and are gathered
// for the step as one unit.
//
// The contract:
//  - A unit's parameters are read only inside `body`, which runs once per `run` call, on the calling
//    thread, before run returns. A unit may run several times in a step (each call gathers it).
//  - `inputs` are defined tensors; gradients flow back to those that require them. Non-tensor state
//    (RoPE tables, flags) is captured by `body`. `body` returns tensors it computed (not its inputs).
//  - Units run in the same order on every rank (each gather is a collective).

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// One unit: its name (for logs) and its parameters, named as Model::module()->named_parameters() names them.
struct ShardUnit {
  std::string name;
  std::vector<std::string> parameters;
};

/// Runs a model's units when a strategy shards their parameters.
class UnitRunner {
 public:
  using Body = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
  virtual ~UnitRunner() = default;
  /// `body(inputs)` with unit `unit`'s (an index into Model::shard_units()) parameters gathered.
  virtual std::vector<at::Tensor> run(std::size_t unit, const std::vector<at::Tensor>& inputs, const Body& body) = 0;
  /// Whether running a unit is a collective, so that every rank must run the same units in the same
  /// order (fsdp gathers each); false for a runner that only moves memory (block swap).
  virtual bool collective() const { return true; }
};

/// `body(inputs)` through `runner`, or directly when there is none (the model is not sharded).
inline std::vector<at::Tensor> run_unit(UnitRunner* runner, std::size_t unit, const std::vector<at::Tensor>& inputs,
                                        const UnitRunner::Body& body) {
  return runner != nullptr ? runner->run(unit, inputs, body) : body(inputs);
}

}  // namespace wanfw
