#include "optimizer/weight_averages.hpp"

#include <torch/torch.h>

namespace wanfw {

void WeightAverages::track(const std::vector<at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (const at::Tensor& p : params) {
    if (index_.contains(p.unsafeGetTensorImpl())) continue;
    index_.emplace(p.unsafeGetTensorImpl(), entries_.size());
    entries_.push_back({p, p.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true)});
  }
}

at::Tensor WeightAverages::average(const at::Tensor& param) const {
  const auto it = index_.find(param.unsafeGetTensorImpl());
  return it == index_.end() ? at::Tensor() : entries_[it->second].average;
}

void WeightAverages::restore(const at::Tensor& param, const at::Tensor& value) {
  const auto it = index_.find(param.unsafeGetTensorImpl());
  if (it == index_.end()) return;
  torch::NoGradGuard no_grad;
  entries_[it->second].average.copy_(value);
}

void WeightAverages::update(std::int64_t step) {
  torch::NoGradGuard no_grad;
  const bool follow = step <= settings_.start_step;
  for (Entry& e : entries_) {
    if (!e.param.grad().defined()) continue;  // not updated by this step (another phase's, or no sample)
    if (follow) e.average.copy_(e.param);
    else e.average.mul_(settings_.decay).add_(e.param.detach().to(at::kFloat), 1.0 - settings_.decay);
  }
}

double WeightAverages::bytes() const {
  double total = 0;
  for (const Entry& e : entries_) total += static_cast<double>(e.average.nbytes());
  return total;
}

ParameterAverages* parameter_averages(torch::optim::AdamW& optimizer) {
  auto* averaging = dynamic_cast<AveragingAdamW*>(&optimizer);
  return averaging != nullptr ? averaging->averages.get() : nullptr;
}

}  // namespace wanfw
