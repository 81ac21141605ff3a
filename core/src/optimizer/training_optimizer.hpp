#pragma once
// Internal: the run's optimizer — AdamW over the model's parameter groups, each with its own
// learning-rate multiplier, weight decay and betas. The trainer sets the learning rate of a step
// and steps it; checkpoints save and restore its state. It carries the run's averages of the
// trained parameters (the `ema` section, weight_averages.hpp).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include "config/core_sections.hpp"

namespace torch::optim {
class AdamW;
}

namespace wanfw {

struct ParameterGroup;
class AveragingAdamW;
class WeightAverages;

class TrainingOptimizer {
 public:
  /// AdamW over parameter `groups` (the model's, as the strategy places them: Strategy::
  /// parameter_groups), stepped by `settings.implementation` (auto | fused | per_tensor). Throws
  /// wanfw::Error for a parameter listed in two groups, a negative or non-finite lr_scale, nothing
  /// to train, or `fused` for a parameter on a device ATen has no fused kernel for. With `ema`
  /// enabled, averages the parameters of its groups (wanfw::Error naming a group the model lacks).
  TrainingOptimizer(std::vector<ParameterGroup> groups, const OptimizerSettings& settings,
                    const EmaSettings& ema = {});
  ~TrainingOptimizer();

  /// The trainable parameters, in optimizer order.
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  /// Whether ATen registers its fused AdamW kernel for tensors on `device`.
  static bool fused_kernel_available(c10::DeviceType device);
  /// Whether step() runs ATen's fused kernel (else torch::optim::AdamW's per-tensor loop).
  bool fused() const { return fused_; }
  /// "AdamW: ATen's fused multi-tensor kernel (cpu)" or "AdamW: per-tensor loop (...)".
  std::string describe() const;
  /// "name (N tensors, lr x s, weight decay w, betas b1/b2); ..." when the model has several groups, else empty.
  std::string describe_groups() const;
  /// Every group's learning rate for the step's peak `lr`.
  void set_learning_rate(double lr);
  /// "lr/<group>" -> the group's learning rate, when the model has several groups.
  std::map<std::string, double> group_learning_rates(double lr) const;
  void zero_grad();
  /// One AdamW step of every parameter with a gradient. Both implementations read and write the
  /// same state (torch::optim::AdamWParamState: step, exp_avg, exp_avg_sq).
  void step();
  /// After optimizer step `step`: the averages of the parameters it updated (WeightAverages::update).
  void update_averages(std::int64_t step);
  /// "ema: decay d of groups a, b (N tensors, M MiB in float32), the weights up to step s", or empty.
  std::string describe_averages() const;
  torch::optim::AdamW& adamw();

 private:
  /// Parameters of one group, device and dtype, for one call of the fused kernel.
  void fused_step();

  struct FusedRun {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  };

  std::vector<at::Tensor> parameters_;
  std::vector<std::string> group_names_;
  std::vector<double> lr_scales_;
  std::string devices_;  ///< the parameters' device types, for describe()
  bool fused_ = true;
  std::unique_ptr<AveragingAdamW> adamw_;
};

}  // namespace wanfw
