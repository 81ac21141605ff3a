#include "optimizer/training_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_fused_adamw.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include "optimizer/weight_averages.hpp"
#include "wanfw/error.hpp"
#include "wanfw/model.hpp"

namespace wanfw {

TrainingOptimizer::TrainingOptimizer(std::vector<ParameterGroup> model_groups, const OptimizerSettings& o,
                                     const EmaSettings& ema) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::map<const void*, std::string> owner;  // parameter -> its group, to refuse duplicates
  std::vector<at::Tensor> averaged;
  for (auto& group : model_groups) {
    if (group.parameters.empty()) continue;
    if (!(group.lr_scale >= 0) || !std::isfinite(group.lr_scale))
      throw Error(fmt::format("parameter group '{}' has lr_scale {}", group.name, group.lr_scale),
                  "the model plugin must give every group a finite, non-negative lr_scale");
    std::vector<at::Tensor> tensors;
    for (auto& [name, tensor] : group.parameters) {
      const auto [it, fresh] = owner.emplace(tensor.unsafeGetTensorImpl(), group.name);
      if (!fresh)
        throw Error(fmt::format("parameter '{}' is in two parameter groups, '{}' and '{}'", name, it->second, group.name),
                    "the model plugin's parameter_groups() must list each parameter once");
      tensors.push_back(tensor);
      parameters_.push_back(tensor);
    }
    auto options = std::make_unique<torch::optim::AdamWOptions>(o.lr);
    options->betas({group.beta1.value_or(o.beta1), group.beta2.value_or(o.beta2)})
        .eps(o.eps)
        .weight_decay(group.weight_decay.value_or(o.weight_decay));
    if (ema.groups.empty() || std::ranges::find(ema.groups, group.name) != ema.groups.end())
      averaged.insert(averaged.end(), tensors.begin(), tensors.end());
    groups.emplace_back(std::move(tensors), std::move(options));
    group_names_.push_back(group.name);
    lr_scales_.push_back(group.lr_scale);
  }
  if (parameters_.empty())
    throw Error("the model has no trainable parameters", "check the model plugin's parameter_groups()");
  std::set<c10::DeviceType> types;
  for (const at::Tensor& p : parameters_) types.insert(p.device().type());
  std::string without;  // device types ATen has no fused kernel for
  for (const c10::DeviceType type : types) {
    devices_ += (devices_.empty() ? "" : ", ") + c10::DeviceTypeName(type, /*lower_case=*/true);
    if (!fused_kernel_available(type)) without += (without.empty() ? "" : ", ") + c10::DeviceTypeName(type, true);
  }
  if (o.implementation == "fused" && !without.empty())
    throw Error(fmt::format("optimizer.implementation is fused, but ATen has no fused AdamW kernel for {} tensors", without),
                "set optimizer.implementation to auto or per_tensor");
  fused_ = o.implementation != "per_tensor" && without.empty();
  adamw_ = std::make_unique<AveragingAdamW>(
      std::move(groups), torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  if (!ema.enabled()) return;
  for (const std::string& name : ema.groups)
    if (std::ranges::find(group_names_, name) == group_names_.end())
      throw ConfigError(ema.groups_where,
                        fmt::format("ema.groups: '{}' is not a parameter group of the model (its groups: {})",
                                    name, fmt::join(group_names_, ", ")),
                  "name groups the model trains, or leave ema.groups empty to average every group");
  adamw_->averages = std::make_unique<WeightAverages>(ema);
  adamw_->averages->track(averaged);
}

torch::optim::AdamW& TrainingOptimizer::adamw() { return *adamw_; }

void TrainingOptimizer::update_averages(std::int64_t step) {
  if (adamw_->averages) adamw_->averages->update(step);
}

std::string TrainingOptimizer::describe_averages() const {
  if (!adamw_->averages) return {};
  const EmaSettings& e = adamw_->averages->settings();
  return fmt::format("ema: decay {:g} of {} ({} tensors, {:.1f} MiB in float32){}", e.decay,
                     e.groups.empty() ? std::string("every group") : "groups " + fmt::format("{}", fmt::join(e.groups, ", ")),
                     adamw_->averages->count(), adamw_->averages->bytes() / (1024.0 * 1024.0),
                     e.start_step > 0 ? fmt::format(", the weights themselves up to step {}", e.start_step) : "");
}

TrainingOptimizer::~TrainingOptimizer() = default;

bool TrainingOptimizer::fused_kernel_available(c10::DeviceType device) {
  const auto op = c10::Dispatcher::singleton().findSchema({"aten::_fused_adamw_", ""});
  return op.has_value() &&
         op->hasKernelForDispatchKey(c10::computeDispatchKey(at::kFloat, at::kStrided, c10::Device(device)));
}

std::string TrainingOptimizer::describe() const {
  return fused_ ? fmt::format("AdamW: ATen's fused multi-tensor kernel ({})", devices_)
                : fmt::format("AdamW: torch::optim::AdamW's per-tensor loop ({})", devices_);
}

std::string TrainingOptimizer::describe_groups() const {
  if (group_names_.size() < 2) return {};
  std::string line;
  for (std::size_t i = 0; i < group_names_.size(); ++i) {
    const auto& g = static_cast<const torch::optim::AdamWOptions&>(adamw_->param_groups()[i].options());
    line += fmt::format("{}{} ({} tensors, lr x {:g}, weight decay {:g}, betas {:g}/{:g})", i ? "; " : "",
                        group_names_[i], adamw_->param_groups()[i].params().size(), lr_scales_[i], g.weight_decay(),
                        std::get<0>(g.betas()), std::get<1>(g.betas()));
  }
  return line;
}

void TrainingOptimizer::set_learning_rate(double lr) {
  auto& groups = adamw_->param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i)
    static_cast<torch::optim::AdamWOptions&>(groups[i].options()).lr(lr * lr_scales_[i]);
}

std::map<std::string, double> TrainingOptimizer::group_learning_rates(double lr) const {
  std::map<std::string, double> rates;
  if (group_names_.size() > 1)
    for (std::size_t i = 0; i < group_names_.size(); ++i) rates["lr/" + group_names_[i]] = lr * lr_scales_[i];
  return rates;
}

void TrainingOptimizer::zero_grad() { adamw_->zero_grad(/*set_to_none=*/true); }

void TrainingOptimizer::step() {
  if (fused_) fused_step();
  else adamw_->step();
}

void TrainingOptimizer::fused_step() {
  // AdamW as ATen's fused multi-tensor kernel (one pass over each parameter, its gradient and its
  // two moments), on the state torch::optim::AdamW keeps, so checkpoints read and restore it as
  // before. Tensors go to the kernel in runs of one device and dtype within a parameter group.
  torch::NoGradGuard no_grad;
  auto& state = adamw_->state();
  for (auto& group : adamw_->param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::map<std::pair<std::string, at::ScalarType>, FusedRun> runs;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      if (p.numel() == 0) continue;  // nothing to update (the kernel's fast path refuses an empty last tensor)
      FusedRun& run = runs[{p.device().str(), p.scalar_type()}];
      run.params.push_back(p);
      run.grads.push_back(p.grad());
      run.exp_avgs.push_back(s.exp_avg());
      run.exp_avg_sqs.push_back(s.exp_avg_sq());
      run.steps.push_back(at::full({}, static_cast<double>(s.step()), p.options().dtype(at::kFloat)));
    }
    for (auto& [key, run] : runs)
      at::_fused_adamw_(run.params, run.grads, run.exp_avgs, run.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, run.steps,
                        o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                        /*amsgrad=*/false, /*maximize=*/false);
  }
}

}  // namespace wanfw
