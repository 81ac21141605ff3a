#include "wanfw/strategy.hpp"

#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include "wanfw/error.hpp"
#include "wanfw/parameter_averages.hpp"

namespace wanfw {

StepOutput Strategy::forward(Model& model, const Batch& batch, const MicroStep& micro, const c10::Device& device) {
  const Batch on_device = batch.to(device, /*non_blocking=*/device.is_cuda());
  std::optional<Precision::AutocastScope> autocast;
  if (micro.precision != nullptr) autocast.emplace(*micro.precision, device);
  model.set_phase(micro.phase);
  return model.training_step(on_device);
}

void Strategy::backward(const StepOutput& out, const MicroStep& micro, double share) {
  const double weight = micro.weight * share / static_cast<double>(micro.count);
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

namespace {

TensorRows whole(const std::string& name, const at::Tensor& tensor) {
  const std::vector<std::int64_t> shape = tensor.sizes().vec();
  return {name, shape, 0, shape.empty() ? 1 : shape[0], tensor.detach()};
}

}  // namespace

StatePieces Strategy::state_pieces(Model& model, torch::optim::AdamW& optimizer) {
  if (shards_state())
    throw std::logic_error(describe() + ": a strategy that shards the state writes its own pieces (state_pieces)");
  // Whole tensors, from the first rank of each network group (or rank 0): the others hold copies.
  const NetworkGroups* groups = network_groups();
  StatePieces pieces;
  if (groups != nullptr ? groups->rank_in_group != 0 : rank() != 0) return pieces;
  for (const auto& [name, tensor] : model.checkpoint_tensors()) pieces.model.push_back(whole(name, tensor));
  for (const auto& [name, param] : model.trainable_parameters())
    for (const auto& [piece, tensor] : optimizer_state_tensors(name, param, optimizer))
      pieces.optimizer.push_back(whole(piece, tensor));
  return pieces;
}

void Strategy::load_optimizer_state(Model& model, torch::optim::AdamW& optimizer, const TensorRowSource& moments) {
  if (shards_state())
    throw std::logic_error(describe() + ": a strategy that shards the state restores its own (load_optimizer_state)");
  auto& optimizer_state = optimizer.state();
  auto read_into = [&](const std::string& name, const at::Tensor& like, const TensorRole& role) {
    require_shape(moments, name, like.sizes().vec());
    return moments.rows(name, 0, like.dim() == 0 ? 1 : like.size(0), role).to(like.options()).view(like.sizes());
  };
  ParameterAverages* averages = parameter_averages(optimizer);
  for (const auto& [name, param] : model.trainable_parameters()) {
    if (averages != nullptr && moments.contains(name + ".ema"))
      averages->restore(param, read_into(name + ".ema", param, TensorRole::weight()));
    if (!moments.contains(name + ".step")) continue;
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(read_step_count(moments, name + ".step"));
    for (const char* field : {".exp_avg", ".exp_avg_sq"})
      if (!moments.contains(name + field))
        throw FileError(fmt::format("{}: optimizer state '{}{}' is missing", moments.path().string(), name, field),
                        "the checkpoint is damaged; resume from an earlier one");
    s->exp_avg(read_into(name + ".exp_avg", param, TensorRole::first_moment()));
    s->exp_avg_sq(read_into(name + ".exp_avg_sq", param, TensorRole::second_moment()));
    if (moments.contains(name + ".max_exp_avg_sq"))
      s->max_exp_avg_sq(read_into(name + ".max_exp_avg_sq", param, TensorRole::second_moment()));
    optimizer_state[param.unsafeGetTensorImpl()] = std::move(s);
  }
}

}  // namespace wanfw
