#include "reporting/metric_window.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "wanfw/strategy.hpp"

namespace wanfw {

void MetricWindow::add(const StepScalars& step) {
  const auto sum = [this](const std::string& name, double value) {
    sums_[name] += value;
    ++counts_[name];
  };
  ++steps_;
  samples_ += step.samples;
  seconds_ += step.seconds;
  sum("loss", step.loss);
  counts_.try_emplace("grad_norm", 0);  // every window reports it, overflowed or not
  sums_.try_emplace("grad_norm", 0.0);
  if (std::isfinite(step.grad_norm)) sum("grad_norm", step.grad_norm);
  for (const auto& [name, value] : step.metrics) sum(name, value);
  for (const auto& [name, mean] : step.sample_means) {
    sample_means_[name].first += mean.first;
    sample_means_[name].second += mean.second;
  }
  last_ = step.state;
  last_["loss_step"] = step.loss;
}

std::map<std::string, double> MetricWindow::close(Strategy& strategy) {
  std::map<std::string, double> scalars = last_;
  for (const auto& [name, total] : sums_) {
    const std::int64_t count = counts_.at(name);
    scalars[name] = count > 0 ? total / static_cast<double>(count) : std::numeric_limits<double>::infinity();
  }
  scalars["step_time"] = seconds_ / static_cast<double>(steps_);
  scalars["samples_per_sec"] = static_cast<double>(samples_) / std::max(seconds_, 1e-9);
  scalars = strategy.reduce_metrics(std::move(scalars));
  scalars["samples_per_sec"] *= strategy.world_size();
  if (!sample_means_.empty()) {  // every rank holds the same names: the model gives them on every step
    std::vector<double> totals;
    for (const auto& [name, mean] : sample_means_) totals.insert(totals.end(), {mean.first, mean.second});
    if (strategy.world_size() > 1) totals = strategy.all_reduce(std::move(totals), Reduce::Sum);
    std::size_t i = 0;
    for (const auto& [name, mean] : sample_means_) {
      if (totals.at(i + 1) > 0) scalars[name] = totals.at(i) / totals.at(i + 1);
      i += 2;
    }
  }
  *this = MetricWindow();
  return scalars;
}

}  // namespace wanfw
