#include "wanfw/strategy.hpp"

namespace wanfw {

StepOutput Strategy::micro_step(Model& model, const Batch& batch, const MicroStep& micro) {
  const Batch on_device = batch.to(device(), /*non_blocking=*/device().is_cuda());
  StepOutput out = model.training_step(on_device);
  const at::Tensor scaled = micro.count > 1 ? out.loss / static_cast<double>(micro.count) : out.loss;
  scaled.backward();
  return out;
}

}  // namespace wanfw
