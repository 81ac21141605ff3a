#pragma once
// The run's exponential moving averages of trained parameters (the `ema` section): a float32
// average of each parameter of the averaged groups, kept beside its AdamW state and checkpointed
// with it as "<parameter>.ema" in the optimizer file. `wanfw sample --ema` and `wanfw export --ema`
// use the averages in place of the weights.
//
// A strategy that writes its own optimizer pieces (Strategy::state_pieces) writes the rows of each
// average it holds as it writes exp_avg, and restores them in load_optimizer_state; the host
// refuses to save a run whose strategy wrote moments but no averages (Trainer::check_averages_written).

#include <ATen/core/Tensor.h>

namespace torch::optim {
class AdamW;
}

namespace wanfw {

class ParameterAverages {
 public:
  virtual ~ParameterAverages() = default;
  /// The average of `param` (a tensor the optimizer steps: under fsdp the rank's shard), float32
  /// on its device; an undefined tensor when `param` is not averaged.
  virtual at::Tensor average(const at::Tensor& param) const = 0;
  /// Replaces the average of `param` by `value` (a resume); a no-op when `param` is not averaged.
  virtual void restore(const at::Tensor& param, const at::Tensor& value) = 0;
};

/// The averages the run keeps with `optimizer`, or null when it keeps none.
ParameterAverages* parameter_averages(torch::optim::AdamW& optimizer);

}  // namespace wanfw
