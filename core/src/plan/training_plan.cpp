#include "plan/training_plan.hpp"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

#include "wanfw/error.hpp"
#include "wanfw/strategy.hpp"

namespace wanfw {

namespace {

double reference_batch_of(const CoreSettings& s) {
  return static_cast<double>(s.optimizer.lr_reference_batch > 0 ? s.optimizer.lr_reference_batch : s.data.batch_size);
}

double lr_factor_of(const CoreSettings& s, std::int64_t global_batch) {
  const double ratio = static_cast<double>(global_batch) / reference_batch_of(s);
  if (s.optimizer.lr_scaling == "linear") return ratio;
  if (s.optimizer.lr_scaling == "sqrt") return std::sqrt(ratio);
  return 1.0;
}

std::int64_t total_steps_of(const CoreSettings& s, std::int64_t steps_per_epoch) {
  return s.trainer.max_steps > 0 ? s.trainer.max_steps : s.trainer.epochs * steps_per_epoch;
}

}  // namespace

TrainingPlan::TrainingPlan(const CoreSettings& settings, const Strategy& strategy, std::int64_t batches_per_epoch,
                           PhaseSchedule phases)
    : accumulation_(strategy.accumulation_steps()),
      batches_per_epoch_(batches_per_epoch),
      total_steps_(total_steps_of(settings, steps_per_epoch())),  // the members it reads come first
      global_batch_(strategy.data_world_size() * settings.data.batch_size * accumulation_),
      reference_batch_(reference_batch_of(settings)),
      lr_factor_(lr_factor_of(settings, global_batch_)),
      phases_(std::move(phases)) {
  for (int p = 0; p < phases_.count(); ++p)
    schedules_.emplace_back(settings.optimizer.lr * lr_factor_, settings.scheduler.warmup_steps,
                            phases_.updates_before(p, total_steps_), settings.scheduler.decay == "cosine",
                            settings.scheduler.min_lr_ratio);
  if (batches_per_epoch_ % accumulation_ != 0)
    throw Error(fmt::format("internal: an epoch of {} micro-batches is not whole steps of {}", batches_per_epoch_,
                            accumulation_));
}

double TrainingPlan::learning_rate(std::int64_t step) const {
  const int phase = phases_.phase_at(step);
  return schedules_.at(static_cast<std::size_t>(phase)).at(phases_.updates_before(phase, step));
}

void TrainingPlan::announce(const CoreSettings& settings, const Strategy& strategy, std::int64_t first_step) const {
  const auto& opt = settings.optimizer;
  const int group = strategy.world_size() / strategy.data_world_size();
  if (group > 1)  // sequence parallelism: a group of ranks per sample
    spdlog::info("world size {} in {} sequence-parallel groups of {} | batch {} per group x {} accumulation = global "
                 "batch {} | {} steps per epoch | precision {}",
                 strategy.world_size(), strategy.data_world_size(), group, settings.data.batch_size, accumulation_,
                 global_batch_, steps_per_epoch(), precision_name(settings.precision.mode));
  else if (strategy.network_groups() != nullptr)  // networks on rank groups: a rank's share varies
    spdlog::info("world size {} in {} network groups | global batch {} ({} x {} per device x {} accumulation), each "
                 "sample trained on the ranks of its network | {} steps per epoch | precision {}",
                 strategy.world_size(), strategy.network_groups()->count(), global_batch_, strategy.world_size(),
                 settings.data.batch_size, accumulation_, steps_per_epoch(), precision_name(settings.precision.mode));
  else
    spdlog::info("world size {} | batch {} per device x {} accumulation = global batch {} | {} steps per epoch | "
                 "precision {}",
                 strategy.world_size(), settings.data.batch_size, accumulation_, global_batch_, steps_per_epoch(),
                 precision_name(settings.precision.mode));
  if (opt.lr_scaling != "none")
    spdlog::info("lr scaled {} with the global batch: {:.6g} x {:.4g} = {:.6g} (reference batch {})", opt.lr_scaling,
                 opt.lr, lr_factor_, opt.lr * lr_factor_, reference_batch_);
  const std::int64_t per_epoch = std::max<std::int64_t>(steps_per_epoch(), 1);
  spdlog::info("training {} steps from step {}: {} epoch(s) of {} step(s){}", total_steps_, first_step,
               total_steps_ % per_epoch == 0 ? std::to_string(total_steps_ / per_epoch)
                                             : fmt::format("{:.2f}", static_cast<double>(total_steps_) /
                                                                         static_cast<double>(per_epoch)),
               per_epoch, settings.trainer.max_steps > 0 ? " (trainer.max_steps decides)" : "");
  if (phases_.declared()) spdlog::info("training phases: {}", phases_.describe(total_steps_));
}

}  // namespace wanfw
