#pragma once
// Internal: the run's exponential moving averages of trained parameters (the `ema` section;
// wanfw/parameter_averages.hpp is what strategies and checkpoints see), and the AdamW that carries
// them, so that parameter_averages() finds them from the optimizer every strategy is handed.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/optim/adamw.h>

#include "config/core_sections.hpp"
#include "wanfw/parameter_averages.hpp"

namespace wanfw {

class WeightAverages final : public ParameterAverages {
 public:
  explicit WeightAverages(EmaSettings settings) : settings_(std::move(settings)) {}
  /// Averages `params` from now: each average starts as a float32 copy of the parameter.
  void track(const std::vector<at::Tensor>& params);
  at::Tensor average(const at::Tensor& param) const override;
  void restore(const at::Tensor& param, const at::Tensor& value) override;
  /// After optimizer step `step` (1-based): the average of every parameter the step updated (one
  /// with a gradient) moves, average = decay x average + (1 - decay) x weight; up to start_step it
  /// is the weight.
  void update(std::int64_t step);
  std::size_t count() const { return entries_.size(); }
  double bytes() const;
  const EmaSettings& settings() const { return settings_; }

 private:
  struct Entry {
    at::Tensor param, average;
  };
  EmaSettings settings_;
  std::vector<Entry> entries_;
  std::unordered_map<const void*, std::size_t> index_;  ///< parameter -> its entry
};

/// torch::optim::AdamW with the run's averages beside its state (null: the run keeps none).
class AveragingAdamW final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  std::unique_ptr<WeightAverages> averages;
};

}  // namespace wanfw
