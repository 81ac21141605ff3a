#include "wanfw/strategy.hpp"

#include <optional>

namespace wanfw {

StepOutput Strategy::forward(Model& model, const Batch& batch, const MicroStep& micro) {
  const Batch on_device = batch.to(device(), /*non_blocking=*/device().is_cuda());
  std::optional<Precision::AutocastScope> autocast;
  if (micro.precision != nullptr) autocast.emplace(*micro.precision, device());
  return model.training_step(on_device);
}

void Strategy::backward(const StepOutput& out, const MicroStep& micro) {
  at::Tensor loss = micro.count > 1 ? out.loss / static_cast<double>(micro.count) : out.loss;
  if (micro.precision != nullptr) loss = micro.precision->scale(loss);
  loss.backward();
}

StepOutput Strategy::micro_step(Model& model, const Batch& batch, const MicroStep& micro) {
  StepOutput out = forward(model, batch, micro);
  backward(out, micro);
  return out;
}

}  // namespace wanfw
