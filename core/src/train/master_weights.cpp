#include "train/master_weights.hpp"

#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/nn/module.h>

namespace wanfw {

namespace {

/// The model with masters standing in for the module's parameters they shadow.
class MasterView final : public Model {
 public:
  MasterView(Model& model, std::map<const void*, at::Tensor> masters) : model_(model), masters_(std::move(masters)) {}

  std::shared_ptr<torch::nn::Module> module() override { return model_.module(); }
  std::vector<FieldSpec> batch_fields() const override { return model_.batch_fields(); }
  StepOutput training_step(const Batch& batch) override { return model_.training_step(batch); }
  std::vector<ParameterGroup> parameter_groups() override {
    std::vector<ParameterGroup> groups = model_.parameter_groups();
    for (auto& group : groups) substitute(group.parameters);
    return groups;
  }
  std::vector<std::pair<std::string, at::Tensor>> checkpoint_tensors() override {
    auto tensors = model_.checkpoint_tensors();
    substitute(tensors);
    return tensors;
  }

 private:
  void substitute(std::vector<std::pair<std::string, at::Tensor>>& tensors) const {
    for (auto& [name, tensor] : tensors)
      if (auto it = masters_.find(tensor.unsafeGetTensorImpl()); it != masters_.end()) tensor = it->second;
  }

  Model& model_;
  std::map<const void*, at::Tensor> masters_;
};

}  // namespace

MasterWeights::MasterWeights(Model& model, at::ScalarType compute) {
  at::NoGradGuard no_grad;
  std::map<const void*, at::Tensor> by_parameter;
  for (auto& [name, parameter] : model.trainable_parameters()) {
    if (!parameter.is_floating_point()) continue;
    at::Tensor master = parameter.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
    // Before any backward and before the strategy hooks the parameter: its dtype changes once.
    parameter.set_data(parameter.detach().to(compute));
    by_parameter.emplace(parameter.unsafeGetTensorImpl(), master);
    pairs_.push_back({parameter, master});
  }
  view_ = std::make_unique<MasterView>(model, std::move(by_parameter));
}

MasterWeights::~MasterWeights() = default;

Model& MasterWeights::view() { return *view_; }

void MasterWeights::take_gradients() {
  at::NoGradGuard no_grad;
  for (auto& [parameter, master] : pairs_) {
    at::Tensor& grad = parameter.mutable_grad();
    if (!grad.defined()) continue;
    master.mutable_grad() = grad.to(at::kFloat);
    grad.reset();
  }
}

void MasterWeights::publish() {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> parameters, masters;
  for (auto& [parameter, master] : pairs_) {
    parameters.push_back(parameter.detach());
    masters.push_back(master.detach());
  }
  if (!parameters.empty()) at::_foreach_copy_(parameters, masters);
}

double MasterWeights::fingerprint() const {
  // Each master's sum and sum of squares, weighted by its position: equal masters give equal
  // bits (the same reductions on the same values), different ones almost surely do not.
  at::NoGradGuard no_grad;
  double total = 0;
  for (std::size_t i = 0; i < pairs_.size(); ++i) {
    const at::Tensor& m = pairs_[i].master;
    total += static_cast<double>(i + 1) *
             (m.sum(at::kDouble).item<double>() + at::linalg_vector_norm(m, 2, {}, false, at::kDouble).item<double>());
  }
  return total;
}

std::string MasterWeights::describe() const {
  std::int64_t count = 0;
  for (const auto& pair : pairs_) count += pair.master.numel();
  return fmt::format("{} tensors ({:.3g}M parameters)", pairs_.size(), static_cast<double>(count) / 1e6);
}

}  // namespace wanfw
