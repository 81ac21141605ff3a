#include "wanfw/strategy.hpp"

#include <optional>
#include <stdexcept>

#include <torch/nn/utils/clip_grad.h>

namespace wanfw {

StepOutput Strategy::forward(Model& model, const Batch& batch, const MicroStep& micro, const c10::Device& device) {
  const Batch on_device = batch.to(device, /*non_blocking=*/device.is_cuda());
  std::optional<Precision::AutocastScope> autocast;
  if (micro.precision != nullptr) autocast.emplace(*micro.precision, device);
  model.set_phase(micro.phase);
  return model.training_step(on_device);
}

void Strategy::backward(const StepOutput& out, const MicroStep& micro, double share) {
  const double weight = share / static_cast<double>(micro.count);
  at::Tensor loss = weight != 1.0 ? out.loss * weight : out.loss;
  if (micro.precision != nullptr) loss = micro.precision->scale(loss);
  loss.backward();
}

StepOutput Strategy::micro_step(Model& model, const Batch& batch, const MicroStep& micro) {
  StepOutput out = forward(model, batch, micro);
  backward(out, micro);
  return out;
}

std::map<std::string, double> Strategy::reduce_metrics(std::map<std::string, double> metrics) {
  if (world_size() == 1 || metrics.empty()) return metrics;
  std::vector<double> values;
  for (const auto& [name, value] : metrics) values.push_back(value);
  values = all_reduce(std::move(values), Reduce::Mean);
  std::size_t i = 0;
  for (auto& [name, value] : metrics) value = values.at(i++);
  return metrics;
}

double Strategy::clip_gradients(const std::vector<at::Tensor>& parameters, double max_norm) {
  return torch::nn::utils::clip_grad_norm_(parameters, max_norm);
}

StatePieces Strategy::state_pieces(Model&, torch::optim::AdamW&) {
  throw std::logic_error(describe() + ": state_pieces called on a strategy that does not write pieces");
}

void Strategy::load_optimizer_state(Model&, torch::optim::AdamW&, const TensorRowSource&) {
  throw std::logic_error(describe() + ": load_optimizer_state called on a strategy that does not write pieces");
}

}  // namespace wanfw
