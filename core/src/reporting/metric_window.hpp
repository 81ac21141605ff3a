#pragma once
// Internal: what a logging step reports. A training loss is one batch's, as noisy as the batch;
// the loggers and the progress line get each training scalar averaged over the steps since the
// last log instead, so a curve shows the trend. The logging step's own loss stays as
// "loss_step".
//
// Averaged over the window: the loss, the model's metrics and grad_norm (plain means over the
// steps), step_time (mean) and samples_per_sec (the window's samples over its time); the model's
// sample means as sums over the window and every rank divided by their counts (none logged when
// no sample had a value). Taken at the
// logging step: lr (and lr/<group>), the loss scaler, peak memory. Ranks add their own steps and
// meet once per log (one all-reduce of the window's sums), not once per step.

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace wanfw {

class Strategy;

/// One optimizer step's values on this process.
struct StepScalars {
  double loss = 0;
  double grad_norm = 0;  ///< infinite on a step skipped for fp16 overflow: left out of the mean
  double seconds = 0;
  std::int64_t samples = 0;                    ///< this process's samples in the step
  std::map<std::string, double> metrics;       ///< the model's, means over the step's micro-batches
  std::map<std::string, std::pair<double, double>> sample_means;  ///< the model's (sum, count)
  std::map<std::string, double> state;         ///< lr, loss scale, memory: the latest value is logged
};

class MetricWindow {
 public:
  void add(const StepScalars& step);
  bool empty() const { return steps_ == 0; }
  /// The window's scalars averaged over its steps and over every rank (a collective: every rank
  /// calls it at the same step), then an empty window.
  std::map<std::string, double> close(Strategy& strategy);

 private:
  std::int64_t steps_ = 0;
  std::int64_t samples_ = 0;
  double seconds_ = 0;
  std::map<std::string, double> sums_;   ///< loss, grad_norm and the model's metrics
  std::map<std::string, std::int64_t> counts_;
  std::map<std::string, std::pair<double, double>> sample_means_;  ///< (sum, count) over steps
  std::map<std::string, double> last_;   ///< loss_step and the state values of the latest step
};

}  // namespace wanfw
