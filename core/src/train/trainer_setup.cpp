// The trainer's set-up phase: everything before the first step.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "data/sample_log.hpp"
#include "reporting/progress.hpp"
#include "train/trainer.hpp"
#include "optimizer/training_optimizer.hpp"
#include "train/validation.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace wanfw {

void Trainer::set_up(const Checkpoint* checkpoint) {
  if (checkpoint) restore(*checkpoint);
  NetworkGroups groups;  // networks on rank groups: samples dealt by the model's routes
  std::function<std::vector<int>(const Batch&)> route;
  if (const NetworkGroups* placed = strategy_->network_groups()) {
    groups = *placed;
    route = [model = model_](const Batch& keys) { return model->route(keys); };
    network_load_.emplace(groups, model_->networks());
  }
  loader_ = data_.loader(strategy_->data_rank(), strategy_->data_world_size(), strategy_->accumulation_steps(),
                         strategy_->device(), groups, std::move(route));
  if (checkpoint) resume_position();
  agree_on_epoch_length();
  const bool main = strategy_->is_main();
  if (main) {
    spdlog::info("data: {}", data_.training_set()->summary());
    for (const auto& line : loader_->sampler().describe()) spdlog::info("  {}", line);
  }
  if (settings_.data.sample_log) sample_log_ = std::make_unique<SampleLog>(run_dir_, strategy_->rank());
  plan_.emplace(settings_, *strategy_, loader_->batches_per_epoch(), phases_);
  if (main) {
    if (state_.step >= plan_->total_steps())  // every rank reads the same checkpoint: the same branch
      spdlog::info("nothing to train: the checkpoint is at step {}, {} the run's {} steps ({}); raise "
                   "trainer.max_steps to train on",
                   state_.step, state_.step == plan_->total_steps() ? "the last of" : "past",
                   plan_->total_steps(), settings_.trainer.max_steps > 0 ? "trainer.max_steps" : "trainer.epochs");
    else
      plan_->announce(settings_, *strategy_, state_.step);
  }
  progress_ = std::make_unique<ProgressReporter>(
      main ? ProgressReporter::mode_from(settings_.trainer.progress) : ProgressReporter::Mode::Off, state_.step,
      plan_->total_steps());
  validation_ = std::make_unique<Validation>(settings_, data_, *model_, *strategy_);
  profiler_ = std::make_unique<StepProfiler>(settings_.trainer.profile_from, settings_.trainer.profile_steps,
                                             strategy_->device(), run_dir_ / "profile", strategy_->rank(), main);
  window_first_ = state_.step + 1;
  first_step_ = state_.step + 1;
}

void Trainer::restore(const Checkpoint& checkpoint) {
  checkpoint.load_training_state(trained_, optimizer_->adamw(), *strategy_);
  state_ = checkpoint.state();
  state_.config_yaml = resolved_yaml_;
  if (precision_.scales_loss() && state_.loss_scaler) precision_.restore(*state_.loss_scaler);
  if (state_.world_size != strategy_->world_size() && strategy_->is_main())
    spdlog::info("the checkpoint was written by {} processes and resumes on {}", state_.world_size,
                 strategy_->world_size());
  state_.world_size = strategy_->world_size();
  last_checkpoint_ = checkpoint.folder();
  resumed_from_ = checkpoint.folder();
  if (strategy_->is_main())
    spdlog::info("resumed from {} (step {}, epoch {})", checkpoint.folder().string(), state_.step, state_.epoch);
}

void Trainer::resume_position() {
  // The position in the epoch is kept in samples, all processes together: a run resumed on
  // another layout with the same step batches continues with exactly the samples that follow.
  if (state_.samples_in_epoch < 0)  // written before positions were kept in samples
    state_.samples_in_epoch = state_.batch_in_epoch * settings_.data.batch_size * state_.world_size;
  if (const auto batch = loader_->batch_after(state_.epoch, state_.samples_in_epoch)) {
    state_.batch_in_epoch = *batch;
    return;
  }
  const std::int64_t per_batch =
      settings_.data.batch_size * strategy_->data_world_size() * strategy_->accumulation_steps();
  state_.batch_in_epoch = state_.samples_in_epoch / per_batch * strategy_->accumulation_steps();
  spdlog::warn(
      "the checkpoint is {} samples into epoch {}, where no optimizer step of this layout ends (the step "
      "batches changed: another batch size, world size or accumulation); the data order changes from here",
      state_.samples_in_epoch, state_.epoch);
}

void Trainer::agree_on_epoch_length() {
  const auto length = static_cast<double>(loader_->batches_per_epoch());
  const std::vector<double> extremes = strategy_->all_reduce({length, -length}, Reduce::Max);
  if (extremes[0] != -extremes[1])
    throw Error(fmt::format("rank {}: the ranks' epochs differ in length ({} to {} micro-batches; this rank: {})",
                            strategy_->rank(), -extremes[1], extremes[0], length),
                "every rank must see as many batches per epoch: the data set's sampler must shard it evenly");
}

}  // namespace wanfw
