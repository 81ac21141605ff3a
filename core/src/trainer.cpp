#include "trainer.hpp"

#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "cpu_memory_cache.hpp"
#include "generators.hpp"
#include "peak_memory.hpp"
#include "progress.hpp"
#include "sample_log.hpp"
#include "stop_signal.hpp"
#include "training_optimizer.hpp"
#include "validation.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Trainer::Trainer(const CoreSettings& settings, std::string resolved_yaml, std::shared_ptr<Model> model,
                 std::shared_ptr<Strategy> strategy, const TrainingData& data, LoggerSet& loggers, fs::path run_dir)
    : settings_(settings),
      resolved_yaml_(std::move(resolved_yaml)),
      model_(std::move(model)),
      strategy_(std::move(strategy)),
      data_(data),
      loggers_(loggers),
      checkpoints_(run_dir),
      run_dir_(std::move(run_dir)),
      optimizer_(std::make_unique<TrainingOptimizer>(*model_, settings_.optimizer)),
      precision_(settings_.precision) {
  if (const std::string groups = optimizer_->describe_groups(); !groups.empty() && strategy_->is_main())
    spdlog::info("parameter groups: {}", groups);
  state_.world_size = strategy_->world_size();
  state_.config_yaml = resolved_yaml_;
}

Trainer::~Trainer() = default;

void Trainer::restore(const fs::path& checkpoint) {
  state_ = CheckpointStore::load_training_state(checkpoint, *model_, optimizer_->adamw());
  state_.config_yaml = resolved_yaml_;
  if (precision_.scales_loss() && state_.loss_scaler) precision_.restore(*state_.loss_scaler);
  if (state_.world_size != strategy_->world_size() && strategy_->is_main())
    spdlog::info("the checkpoint was written by {} processes and resumes on {}", state_.world_size,
                 strategy_->world_size());
  state_.world_size = strategy_->world_size();
  last_checkpoint_ = checkpoint;
  resumed_from_ = checkpoint;
  if (strategy_->is_main())
    spdlog::info("resumed from {} (step {}, epoch {})", checkpoint.string(), state_.step, state_.epoch);
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
  const std::int64_t per_batch = settings_.data.batch_size * strategy_->world_size() * strategy_->accumulation_steps();
  state_.batch_in_epoch = state_.samples_in_epoch / per_batch * strategy_->accumulation_steps();
  spdlog::warn("the checkpoint is {} samples into epoch {}, where no optimizer step of this layout ends (the step "
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

Trainer::MicroBatchTotals Trainer::run_micro_batches() {
  if (state_.batch_in_epoch >= plan_->batches_per_epoch()) {  // the same step on every rank
    ++state_.epoch;
    state_.batch_in_epoch = 0;
    loader_->start_epoch(state_.epoch, 0);
  }
  const int count = plan_->accumulation();
  // Models draw from their samples' streams (wanfw/sample_random.hpp). The default generators
  // are seeded too, for plugins that still draw from them: (seed, rank, step) reproduces a run on
  // the same layout, not across layouts.
  seed_generators(settings_.run.seed, strategy_->rank(), state_.step);
  optimizer_->zero_grad();
  at::Tensor loss_sum;
  std::map<std::string, at::Tensor> metric_sums;
  MicroBatchTotals totals;
  for (int m = 0; m < count; ++m) {
    std::optional<Batch> batch = loader_->next();
    if (!batch)
      throw Error(fmt::format("rank {}: the data loader ran out at micro-batch {} of epoch {} ({} expected)",
                              strategy_->rank(), state_.batch_in_epoch, state_.epoch, plan_->batches_per_epoch()));
    if (sample_log_) sample_log_->record(state_.step + 1, m, state_.epoch, loader_->last_bucket(), *batch);
    ++state_.batch_in_epoch;
    totals.samples += batch->size;
    const StepOutput out = strategy_->micro_step(*model_, *batch, {m, count, m + 1 == count, &precision_});
    const at::Tensor loss = out.loss.detach().to(at::kDouble);
    loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
    for (const auto& [name, value] : out.metrics) {
      const at::Tensor v = value.detach().to(at::kDouble);
      auto it = metric_sums.find(name);
      if (it == metric_sums.end()) metric_sums.emplace(name, v);
      else it->second = it->second + v;
    }
  }
  strategy_->before_optimizer_step(*model_);
  totals.loss = loss_sum.item<double>() / count;
  for (const auto& [name, sum] : metric_sums) totals.metrics[name] = sum.item<double>() / count;
  return totals;
}

void Trainer::apply_update(bool overflow, double lr) {
  optimizer_->set_learning_rate(lr);
  if (overflow) {
    if (strategy_->is_main())
      spdlog::info("step {}: fp16 gradients overflowed at loss scale {:g}; step skipped, scale now {:g}",
                   state_.step + 1, precision_.scaler().scale,
                   precision_.scaler().scale * settings_.precision.backoff_factor);
  } else {
    optimizer_->step();
  }
  precision_.update(overflow);
  if (precision_.scales_loss()) state_.loss_scaler = precision_.scaler();
}

std::map<std::string, double> Trainer::report(const MicroBatchTotals& totals, double lr, double grad_norm,
                                              bool overflow, double loss_scale, double step_seconds, bool log_now) {
  skipped_steps_ += overflow ? 1 : 0;
  StepScalars step{totals.loss, grad_norm, step_seconds, totals.samples, totals.metrics, {}};
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

fs::path Trainer::save_checkpoint() {
  state_.samples_in_epoch = loader_->samples_before(state_.epoch, state_.batch_in_epoch);
  if (sample_log_) sample_log_->flush();
  strategy_->barrier();
  fs::path path;
  if (strategy_->is_main()) {
    path = checkpoints_.save(state_, *model_, optimizer_->adamw(), settings_.checkpoint.keep_last);
    spdlog::debug("checkpoint written: {}", path.string());
  } else {
    path = checkpoints_.folder() / fmt::format("step-{:08d}", state_.step);
  }
  strategy_->barrier();
  last_checkpoint_ = path;
  return path;
}

TrainingResult Trainer::fit(const std::optional<fs::path>& checkpoint) {
  if (checkpoint) restore(*checkpoint);
  loader_ = data_.loader(strategy_->rank(), strategy_->world_size(), strategy_->accumulation_steps(),
                         strategy_->device());
  if (checkpoint) resume_position();
  agree_on_epoch_length();
  if (strategy_->is_main()) {
    spdlog::info("data: {}", data_.training_set()->summary());
    for (const auto& line : loader_->sampler().describe()) spdlog::info("  {}", line);
  }
  if (settings_.data.sample_log) sample_log_ = std::make_unique<SampleLog>(run_dir_, strategy_->rank());
  plan_.emplace(settings_, *strategy_, loader_->batches_per_epoch());
  const std::int64_t total = plan_->total_steps();
  const bool main = strategy_->is_main();
  if (main) plan_->announce(settings_, *strategy_, state_.step);
  ProgressReporter progress(main ? ProgressReporter::mode_from(settings_.trainer.progress)
                                 : ProgressReporter::Mode::Off,
                            state_.step, total);
  Validation validation(settings_, data_, *model_, *strategy_);

  const CpuMemoryCacheScope memory_cache(strategy_->device(), settings_.trainer.cpu_memory_cache_mb);
  StopSignal stop;
  const auto started = std::chrono::steady_clock::now();
  TrainingResult result;
  std::int64_t window_first = state_.step + 1;  // the logging window's first step
  std::int64_t last_saved_step = checkpoint ? state_.step : -1;
  loader_->start_epoch(state_.epoch, state_.batch_in_epoch);

  while (state_.step < total) {
    const auto step_started = std::chrono::steady_clock::now();
    const MicroBatchTotals totals = run_micro_batches();

    // fp16: gradients back to their true scale; an overflow skips the step (the scaler's job,
    // not the NaN guard's).
    const double loss_scale = precision_.scaler().scale;
    const bool overflow = precision_.unscale_and_check(optimizer_->parameters());
    const double clip = settings_.trainer.grad_clip > 0 ? settings_.trainer.grad_clip
                                                        : std::numeric_limits<double>::infinity();
    const double grad_norm = overflow ? INFINITY : torch::nn::utils::clip_grad_norm_(optimizer_->parameters(), clip);
    const Decision decision = agree(totals.loss, grad_norm, overflow);
    if (decision.nonfinite_rank >= 0) stop_on_nonfinite(decision, totals.loss, grad_norm);

    const double lr = plan_->learning_rate(state_.step);
    apply_update(overflow, lr);
    ++state_.step;
    const bool periodic = settings_.checkpoint.every > 0 && state_.step % settings_.checkpoint.every == 0;
    const bool checkpoint_due = periodic || decision.signal != 0 || state_.step == total;
    strategy_->after_optimizer_step(*model_, {state_.step, !overflow, checkpoint_due, &optimizer_->adamw()});

    // A stop logs the window it ends, so a resumed run's next window starts where this one stopped.
    const bool log_now = state_.step % settings_.trainer.log_every == 0 || state_.step == total || decision.signal != 0;
    std::map<std::string, double> logged =
        report(totals, lr, grad_norm, overflow, loss_scale, seconds_since(step_started), log_now);
    result.samples += totals.samples * strategy_->world_size();
    if (log_now) {
      const LoggedLoss window{window_first, state_.step, logged.at("loss")};
      if (!result.first_logged) result.first_logged = window;
      result.last_logged = window;
      window_first = state_.step + 1;
    }
    if (main) progress.update(state_.step, logged);
    // Validation results go into the step's row when it is a logging step, else into one of their own.
    const bool validating = validation.due(state_.step, total);
    if (validating) logged.merge(validation.run(state_.step));
    loggers_.scalars(state_.step, logged);
    if (validating && settings_.validation.preview) validation.previews(state_.step, loggers_);
    if (settings_.trainer.histogram_every > 0 && state_.step % settings_.trainer.histogram_every == 0)
      loggers_.parameter_histograms(state_.step, *model_);
    if (checkpoint_due) {
      save_checkpoint();
      last_saved_step = state_.step;
    }
    if (decision.signal != 0) {
      result.stop_signal = decision.signal;
      break;
    }
  }
  if (last_saved_step != state_.step) save_checkpoint();
  if (sample_log_) sample_log_->flush();
  result.skipped_samples = static_cast<std::int64_t>(
      strategy_->all_reduce({static_cast<double>(loader_->skipped())}, Reduce::Sum).at(0));
  progress.finish();
  loggers_.flush();
  result.final_step = state_.step;
  result.last_checkpoint = last_checkpoint_;
  result.wall_seconds = seconds_since(started);
  result.peak_memory_mib = peak_memory_mib();
  result.peak_gpu_memory_mib = peak_gpu_memory_mib(strategy_->device());
  return result;
}

}  // namespace wanfw
