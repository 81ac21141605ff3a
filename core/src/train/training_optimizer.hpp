#pragma once
// Internal: the run's optimizer — AdamW over the model's parameter groups, each with its own
// learning-rate multiplier, weight decay and betas. The trainer sets the learning rate of a step
// and steps it; checkpoints save and restore its state.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/core_sections.hpp"

namespace torch::optim {
class AdamW;
}

namespace wanfw {

struct ParameterGroup;

class TrainingOptimizer {
 public:
  /// AdamW over parameter `groups` (the model's, as the strategy places them: Strategy::
  /// parameter_groups). Throws wanfw::Error for a parameter listed in two groups, a negative or
  /// non-finite lr_scale, or nothing to train.
  TrainingOptimizer(std::vector<ParameterGroup> groups, const OptimizerSettings& settings);
  ~TrainingOptimizer();

  /// The trainable parameters, in optimizer order.
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  /// "name (N tensors, lr x s, weight decay w, betas b1/b2); ..." when the model has several groups, else empty.
  std::string describe_groups() const;
  /// Every group's learning rate for the step's peak `lr`.
  void set_learning_rate(double lr);
  /// "lr/<group>" -> the group's learning rate, when the model has several groups.
  std::map<std::string, double> group_learning_rates(double lr) const;
  void zero_grad();
  /// One AdamW step of every parameter with a gradient (ATen's fused kernel).
  void step();
  torch::optim::AdamW& adamw() { return *adamw_; }

 private:
  /// Parameters of one group, device and dtype, for one call of the fused kernel.
  struct FusedRun {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  };

  std::vector<at::Tensor> parameters_;
  std::vector<std::string> group_names_;
  std::vector<double> lr_scales_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
};

}  // namespace wanfw
