#pragma once
// A model's units: the groups of parameters used together (a transformer block each) that the host
// brings to the device just before their use and lets go right after, through one runtime
// (wanfw/parallel/unit_runtime.hpp) with a fetcher per mechanism: a strategy that shards the parameters
// (fsdp) gathers a unit's shards whole and reduce-scatters its gradients; block swap streams a
// unit's frozen weights from host memory into a device slot.
//
// A model declares its units (Model::units) and runs each unit's forward through the runner it is
// handed (Model::set_unit_runner):
//
//   std::vector<wanfw::Unit> units() override;   // {"blocks.0", {"blocks.0.q.weight", ...}}, ...
//   void set_unit_runner(wanfw::UnitRunner* runner) override { runner_ = runner; }
//   ...
//   x = wanfw::run_unit(runner_, i, {x, e}, [&](const std::vector<at::Tensor>& in) {
//         return std::vector<at::Tensor>{blocks[i]->forward(in[0], in[1])};
//       }).at(0);
//
// The runner fetches the unit's parameters (so the module's own tensors hold their whole values on
// the device while `body` runs: fsdp gathers them, block swap copies them into a slot), runs
// `body`, and lets them go; during backward it fetches them again (fsdp then reduce-scatters the
// unit's gradients, each rank keeping its shard's). Under fsdp, parameters in no unit are gathered
// for the whole step, and a model without units trains too: its parameters, gradients and
// optimizer state stay sharded between steps, and are gathered for the step as one unit; block
// swap streams only declared units.
//
// The contract:
//  - A unit's parameters are read only inside `body`, which runs once per `run` call, on the calling
//    thread, before run returns. A unit may run several times in a step (each call gathers it).
//  - `inputs` are defined tensors; gradients flow back to those that require them. Non-tensor state
//    (RoPE tables, flags) is captured by `body`. `body` returns tensors it computed (not its inputs).
//  - Under a collective runner (fsdp: each gather is one), units run in the same order on every rank.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// One unit: its name (for logs) and its parameters, named as Model::module()->named_parameters() names them.
struct Unit {
  std::string name;
  std::vector<std::string> parameters;
};

/// Runs a model's units (the host's UnitRuntime, with fsdp's or block swap's fetcher).
class UnitRunner {
 public:
  using Body = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
  virtual ~UnitRunner() = default;
  /// `body(inputs)` with unit `unit`'s (an index into Model::units()) parameters gathered.
  virtual std::vector<at::Tensor> run(std::size_t unit, const std::vector<at::Tensor>& inputs, const Body& body) = 0;
  /// Whether running a unit is a collective, so that every rank must run the same units in the same
  /// order (fsdp gathers each); false for a runner that only moves memory (block swap).
  virtual bool collective() const { return true; }
};

/// `body(inputs)` through `runner`, or directly when there is none (no unit is fetched: every
/// parameter stays on the device).
inline std::vector<at::Tensor> run_unit(UnitRunner* runner, std::size_t unit, const std::vector<at::Tensor>& inputs,
                                        const UnitRunner::Body& body) {
  return runner != nullptr ? runner->run(unit, inputs, body) : body(inputs);
}

}  // namespace wanfw
