// The trainer's reporting after each step: the logging window, the progress line, the loggers,
// validation and its previews, parameter histograms.
#include <cmath>

#include <spdlog/spdlog.h>

#include "memory/peak_memory.hpp"
#include "reporting/progress.hpp"
#include "train/trainer.hpp"
#include "optimizer/training_optimizer.hpp"
#include "train/validation.hpp"

namespace wanfw {

void Trainer::report_step(const MicroBatchTotals& totals, const Gradients& gradients, double lr, double step_seconds,
                          bool stops, TrainingResult& result) {
  const std::int64_t total = plan_->total_steps();
  // A stop logs the window it ends, so a resumed run's next window starts where this one stopped.
  const bool log_now = state_.step % settings_.trainer.log_every == 0 || state_.step == total || stops;
  std::map<std::string, double> logged =
      report(totals, lr, gradients.grad_norm, gradients.overflow, gradients.loss_scale, step_seconds, log_now);
  result.samples += totals.job_samples >= 0 ? totals.job_samples : totals.samples * strategy_->data_world_size();
  if (log_now) {
    const LoggedLoss window{window_first_, state_.step, logged.at("loss")};
    if (!result.first_logged) result.first_logged = window;
    result.last_logged = window;
    window_first_ = state_.step + 1;
  }
  if (strategy_->is_main()) progress_->update(state_.step, logged);
  if (state_.step == first_step_) log_planned_memory();
  // Validation results go into the step's row when it is a logging step, else into one of their own.
  const bool validating = validation_->due(state_.step, total);
  const bool histograms = settings_.trainer.histogram_every > 0 && state_.step % settings_.trainer.histogram_every == 0;
  if (validating || histograms) strategy_->begin_evaluation(*model_);  // sharded weights gathered
  if (validating) logged.merge(validation_->run(state_.step));
  loggers_.scalars(state_.step, logged);
  if (validating && settings_.validation.preview) validation_->previews(state_.step, loggers_, make_decoder_, run_dir_);
  if (histograms) loggers_.parameter_histograms(state_.step, trained_);  // bf16_weights: the masters
  if (validating || histograms) strategy_->end_evaluation(*model_);
}

void Trainer::validate_at_start() {
  if (!settings_.validation.at_start || state_.step != 0 || !validation_->due(0, plan_->total_steps())) return;
  strategy_->begin_evaluation(*model_);
  loggers_.scalars(0, validation_->run(0));
  if (settings_.validation.preview) validation_->previews(0, loggers_, make_decoder_, run_dir_);
  strategy_->end_evaluation(*model_);
}

void Trainer::log_planned_memory() const {
  const double planned = model_->planned_device_bytes();
  const double measured = peak_gpu_reserved_bytes(strategy_->device());
  if (planned <= 0 || measured <= 0 || !strategy_->is_main()) return;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  spdlog::info("memory: the plan predicted {:.2f} GiB a GPU; the first step reserved {:.2f} GiB "
               "(max_memory_reserved; the plan is off by {:+.1f}%)",
               planned / kGiB, measured / kGiB, 100.0 * (planned - measured) / measured);
}

std::map<std::string, double> Trainer::report(const MicroBatchTotals& totals, double lr, double grad_norm,
                                              bool overflow, double loss_scale, double step_seconds, bool log_now) {
  skipped_steps_ += overflow ? 1 : 0;
  StepScalars step{totals.loss, grad_norm, step_seconds, totals.samples, totals.metrics, totals.sample_means, {}};
  if (phases_.declared()) {  // each phase's own curves, besides the mixed ones
    const std::string& phase = phases_.phase(totals.phase).name;
    step.metrics[phase + "/loss"] = totals.loss;
    if (std::isfinite(grad_norm)) step.metrics[phase + "/grad_norm"] = grad_norm;
  }
  if (!log_now) {
    window_.add(step);
    return {};
  }
  step.state = optimizer_->group_learning_rates(lr);  // values of the moment: taken at the logging step
  step.state["lr"] = lr;
  step.state["peak_memory_mb"] = peak_memory_mib();
  if (strategy_->device().is_cuda()) step.state["peak_gpu_memory_mb"] = peak_gpu_memory_mib(strategy_->device());
  if (precision_.scales_loss()) {
    step.state["loss_scale"] = loss_scale;
    step.state["skipped_steps"] = static_cast<double>(skipped_steps_);
  }
  window_.add(step);
  return window_.close(*strategy_);
}

}  // namespace wanfw
