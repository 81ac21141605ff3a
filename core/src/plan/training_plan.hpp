#pragma once
// Internal: how many optimizer steps a run takes, how many micro-batches each holds, and the
// learning rate at each — worked out once, before the first step.

#include <cstdint>
#include <vector>

#include "config/core_sections.hpp"
#include "plan/lr_schedule.hpp"
#include "plan/phase_schedule.hpp"

namespace wanfw {

class Strategy;

class TrainingPlan {
 public:
  /// `batches_per_epoch`: micro-batches of one epoch on each process (the same on every rank), a
  /// whole number of steps. `phases`: the model's training phases; each phase has its own
  /// learning-rate schedule, warm-up and decay counted in its own updates.
  TrainingPlan(const CoreSettings& settings, const Strategy& strategy, std::int64_t batches_per_epoch,
               PhaseSchedule phases = PhaseSchedule());

  /// Micro-batches per full optimizer step (gradient accumulation).
  int accumulation() const { return accumulation_; }
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  /// An epoch is whole optimizer steps (the sampler deals it in step batches).
  std::int64_t steps_per_epoch() const { return batches_per_epoch_ / accumulation_; }
  /// trainer.max_steps, or trainer.epochs whole epochs.
  std::int64_t total_steps() const { return total_steps_; }
  /// Samples per full optimizer step, all processes together.
  std::int64_t global_batch() const { return global_batch_; }
  /// The learning rate of optimizer step `step` (0-based), with the global-batch scaling applied:
  /// the schedule of the step's phase at that phase's update.
  double learning_rate(std::int64_t step) const;
  const PhaseSchedule& phases() const { return phases_; }

  /// Logs the plan (main process): world size, batch, accumulation, steps, precision, lr scaling.
  void announce(const CoreSettings& settings, const Strategy& strategy, std::int64_t first_step) const;

 private:
  int accumulation_ = 1;
  std::int64_t batches_per_epoch_ = 0;
  std::int64_t total_steps_ = 0;
  std::int64_t global_batch_ = 0;
  double reference_batch_ = 0;
  double lr_factor_ = 1;
  PhaseSchedule phases_;
  std::vector<LearningRateSchedule> schedules_;  ///< one per phase
};

}  // namespace wanfw
