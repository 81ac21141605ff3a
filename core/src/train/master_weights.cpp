#include "train/master_weights.hpp"

#include <algorithm>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
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

/// The arena's bytes for one float32 copy of `parameter` (a master, or its gradient slot).
std::int64_t slot_bytes(const at::Tensor& parameter) { return arena_slot_bytes(parameter.numel(), at::kFloat); }

}  // namespace

double host_state_bytes(Model& model, const EmaSettings& ema) {
  double bytes = 0;
  for (const ParameterGroup& group : model.parameter_groups()) {
    const bool averaged = ema.enabled() && (ema.groups.empty() || std::ranges::find(ema.groups, group.name) !=
                                                                     ema.groups.end());
    for (const auto& [name, parameter] : group.parameters) {
      if (!parameter.is_floating_point()) continue;
      const auto values = static_cast<double>(parameter.numel());
      bytes += 2 * static_cast<double>(slot_bytes(parameter)) + (averaged ? 12 : 8) * values;
    }
  }
  return bytes;
}

MasterWeights::MasterWeights(Model& model, std::optional<at::ScalarType> compute, OptimizerStateHome home,
                             c10::Device device)
    : home_(home) {
  at::NoGradGuard no_grad;
  for (auto& [name, parameter] : model.trainable_parameters()) {
    if (!parameter.is_floating_point()) continue;
    pairs_.push_back({parameter, {}, {}, {}});
    if (home_ == OptimizerStateHome::Device)
      pairs_.back().master = parameter.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  }
  if (home_ == OptimizerStateHome::Host) place_on_host(device);
  std::map<const void*, at::Tensor> by_parameter;
  for (Pair& pair : pairs_) {
    pair.master.requires_grad_(true);
    // Before any backward and before the strategy hooks the parameter: its dtype changes once.
    if (compute) pair.parameter.set_data(pair.parameter.detach().to(*compute));
    by_parameter.emplace(pair.parameter.unsafeGetTensorImpl(), pair.master);
    index_.emplace(pair.parameter.unsafeGetTensorImpl(), index_.size());
  }
  view_ = std::make_unique<MasterView>(model, std::move(by_parameter));
}

void MasterWeights::place_on_host(c10::Device device) {
  std::int64_t total = 0;
  for (const Pair& pair : pairs_) total += 2 * slot_bytes(pair.parameter);
  arena_ = allocate_host_arena(total, HostMemory::Auto, device, {"optimizer.state host", ""});
  std::int64_t offset = 0;
  for (Pair& pair : pairs_) {
    const std::int64_t bytes = slot_bytes(pair.parameter);
    pair.master = arena_tensor(arena_, offset, pair.parameter.sizes(), at::kFloat);
    pair.gradient = arena_tensor(arena_, offset + bytes, pair.parameter.sizes(), at::kFloat);
    offset += 2 * bytes;
    pair.master.copy_(pair.parameter.detach());
  }
}

MasterWeights::~MasterWeights() { streaming_->owner = nullptr; }

Model& MasterWeights::view() { return *view_; }

void MasterWeights::stream_gradients() {
  if (home_ != OptimizerStateHome::Host || !accumulators_.empty()) return;
  streaming_->owner = this;
  for (std::size_t i = 0; i < pairs_.size(); ++i) {
    auto accumulator = accumulator_of(pairs_[i]);
    if (!accumulator) continue;
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [streaming = streaming_, i](const torch::autograd::variable_list& outputs,
                                    const torch::autograd::variable_list&) {
          if (streaming->on && streaming->owner != nullptr) {
            at::NoGradGuard no_grad;
            streaming->owner->move_gradient(streaming->owner->pairs_[i]);
          }
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

c10::intrusive_ptr<torch::autograd::Node> MasterWeights::accumulator_of(Pair& pair) {
  // A parameter block swap streams is an empty placeholder between uses, and an accumulator takes
  // the shape its gradients must have from the parameter it is made for: it is made while a
  // stand-in of the whole shape (one value, expanded) holds the parameter's place.
  at::Tensor& parameter = pair.parameter;
  if (parameter.numel() > 0 || pair.master.numel() == 0) return torch::autograd::impl::grad_accumulator(parameter);
  const at::Tensor placeholder = parameter.detach();
  parameter.set_data(at::empty({1}, placeholder.options()).expand(pair.master.sizes()));
  auto accumulator = torch::autograd::impl::grad_accumulator(parameter);
  parameter.set_data(placeholder);
  return accumulator;
}

void MasterWeights::move_gradient(Pair& pair) {
  at::Tensor& grad = pair.parameter.mutable_grad();
  if (!grad.defined()) return;
  // Into pinned memory the copy runs on a stream of its own once the gradient is computed, and the
  // compute goes on; the device's memory is reused only once the copy has read it.
  copies_.copy(pair.gradient, grad);
  pair.master.mutable_grad() = pair.gradient;
  grad.reset();
}

bool MasterWeights::has_gradient(const at::Tensor& parameter) const {
  if (parameter.grad().defined()) return true;
  const auto it = index_.find(parameter.unsafeGetTensorImpl());
  return it != index_.end() && pairs_[it->second].master.grad().defined();
}

void MasterWeights::take_gradients() {
  at::NoGradGuard no_grad;
  streaming_->on = false;
  for (Pair& pair : pairs_) {
    at::Tensor& grad = pair.parameter.mutable_grad();
    if (!grad.defined()) continue;  // none this step, or moved already
    if (pair.gradient.defined()) {
      move_gradient(pair);
    } else {
      pair.master.mutable_grad() = grad.to(at::kFloat);
      grad.reset();
    }
  }
  copies_.wait();  // the host reads the slots next: every copy must be over
}

void MasterWeights::keep_streamed(const std::function<at::Tensor(const at::Tensor&)>& home_of,
                                  std::function<void()> before_writing) {
  for (Pair& pair : pairs_) pair.home = home_of(pair.parameter);
  before_writing_homes_ = std::move(before_writing);
}

void MasterWeights::publish() {
  at::NoGradGuard no_grad;
  if (before_writing_homes_) before_writing_homes_();
  for (auto& pair : pairs_)  // streamed ones: into block swap's host copy, which the next use streams
    if (pair.home.defined()) pair.home.copy_(pair.master.detach());
  if (home_ == OptimizerStateHome::Host) {  // to the device; from pinned memory without waiting
    for (auto& pair : pairs_)
      if (!pair.home.defined()) pair.parameter.detach().copy_(pair.master.detach(), /*non_blocking=*/arena_.pinned);
    return;
  }
  std::vector<at::Tensor> parameters, masters;
  for (auto& pair : pairs_) {
    if (pair.home.defined()) continue;
    parameters.push_back(pair.parameter.detach());
    masters.push_back(pair.master.detach());
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

std::string MasterWeights::describe(bool gradients_final) const {
  std::int64_t count = 0;
  for (const auto& pair : pairs_) count += pair.master.numel();
  const at::ScalarType compute = pairs_.empty() ? at::kFloat : pairs_.front().parameter.scalar_type();
  const char* name = compute == at::kBFloat16 ? "bf16"
                     : compute == at::kHalf   ? "fp16"
                     : compute == at::kFloat  ? "fp32"
                                              : c10::toString(compute);
  return fmt::format("{} tensors ({:.3g}M parameters) in {} for compute, their fp32 masters {}", pairs_.size(),
                     static_cast<double>(count) / 1e6, name,
                     home_ == OptimizerStateHome::Host
                         ? "and gradients in " + arena_.note +
                               (accumulators_.empty() ? ""
                                : gradients_final     ? "; each gradient moves there as soon as it is whole"
                                                      : "; the gradients move there when backward is over (the "
                                                        "strategy reduces them after it)")
                         : std::string("on the device"));
}

}  // namespace wanfw
