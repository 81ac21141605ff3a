// wanfw/parallel/state_pieces.hpp's optimizer_state_tensors: the names an optimizer's state has in every checkpoint.

#include <torch/optim/adamw.h>

#include "wanfw/parameter_averages.hpp"
#include "wanfw/parallel/state_pieces.hpp"

namespace wanfw {

std::vector<std::pair<std::string, at::Tensor>> optimizer_state_tensors(const std::string& name, const at::Tensor& held,
                                                                        torch::optim::AdamW& optimizer) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  if (const ParameterAverages* averages = parameter_averages(optimizer); averages != nullptr)
    if (const at::Tensor average = averages->average(held); average.defined()) tensors.emplace_back(name + ".ema", average);
  const auto& state = optimizer.state();
  const auto it = state.find(held.unsafeGetTensorImpl());
  if (it == state.end()) return tensors;
  const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
  tensors.emplace_back(name + ".step", at::scalar_tensor(s.step(), at::kLong));
  tensors.emplace_back(name + ".exp_avg", s.exp_avg());
  tensors.emplace_back(name + ".exp_avg_sq", s.exp_avg_sq());
  if (s.max_exp_avg_sq().defined()) tensors.emplace_back(name + ".max_exp_avg_sq", s.max_exp_avg_sq());
  return tensors;
}

}  // namespace wanfw
