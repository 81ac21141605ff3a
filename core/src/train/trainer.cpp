#include "train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "data/sample_log.hpp"
#include "memory/cpu_memory_cache.hpp"
#include "host/fault_point.hpp"
#include "memory/peak_memory.hpp"
#include "host/stop_signal.hpp"
#include "numerics/generators.hpp"
#include "reporting/progress.hpp"
#include "train/master_weights.hpp"
#include "optimizer/training_optimizer.hpp"
#include "train/validation.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Trainer::Trainer(const CoreSettings& settings, std::string resolved_yaml, std::shared_ptr<Model> model,
                 std::shared_ptr<Strategy> strategy, const TrainingData& data, LoggerSet& loggers, fs::path run_dir,
                 MasterWeights* masters)
    : settings_(settings),
      resolved_yaml_(std::move(resolved_yaml)),
      model_(std::move(model)),
      strategy_(std::move(strategy)),
      phases_(model_->phases(), model_->parameter_groups()),
      masters_(masters),
      trained_(masters != nullptr ? masters->view() : *model_),
      data_(data),
      loggers_(loggers),
      checkpoints_(run_dir),
      run_dir_(std::move(run_dir)),
      optimizer_(std::make_unique<TrainingOptimizer>(strategy_->parameter_groups(trained_), settings_.optimizer,
                                                     settings_.ema)),
      precision_(settings_.precision) {
  check_fault_setting();  // a malformed WANFW_FAULT is refused now, not at the first checkpoint
  if (strategy_->is_main()) spdlog::info("optimizer: {}", optimizer_->describe());
  if (masters_ != nullptr) check_master_weights();
  if (const std::string groups = optimizer_->describe_groups(); !groups.empty() && strategy_->is_main())
    spdlog::info("parameter groups: {}", groups);
  if (const std::string averages = optimizer_->describe_averages(); !averages.empty() && strategy_->is_main())
    spdlog::info("{}", averages);
  state_.world_size = strategy_->world_size();
  state_.config_yaml = resolved_yaml_;
  if (phases_.count() > 1)
    for (int p = 0; p < phases_.count(); ++p) {
      std::set<const void*> inside;
      for (const auto& [name, tensor] : model_->phase_parameters(p)) inside.insert(tensor.unsafeGetTensorImpl());
      auto& outside = outside_phase_.emplace_back();
      for (auto& item : model_->trainable_parameters())
        if (!inside.count(item.second.unsafeGetTensorImpl())) outside.push_back(std::move(item));
    }
}

Trainer::~Trainer() = default;

Trainer::MicroBatchTotals Trainer::run_micro_batches() {
  if (state_.batch_in_epoch >= plan_->batches_per_epoch()) {  // the same step on every rank
    ++state_.epoch;
    state_.batch_in_epoch = 0;
    loader_->start_epoch(state_.epoch, 0);
  }
  const int count = plan_->accumulation();
  const int phase = phases_.phase_at(state_.step);
  // Models draw from their samples' streams (wanfw/sample_random.hpp). The default generators
  // are seeded too, for plugins that still draw from them: (seed, rank, step) reproduces a run on
  // the same layout, not across layouts.
  seed_generators(settings_.run.seed, strategy_->rank(), state_.step);
  optimizer_->zero_grad();
  at::Tensor loss_sum;
  std::map<std::string, at::Tensor> metric_sums;
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> mean_sums;
  MicroBatchTotals totals;
  totals.phase = phase;
  for (int m = 0; m < count; ++m) {
    std::optional<Batch> batch = loader_->next();
    if (!batch)
      throw Error(fmt::format("rank {}: the data loader ran out at micro-batch {} of epoch {} ({} expected)",
                              strategy_->rank(), state_.batch_in_epoch, state_.epoch, plan_->batches_per_epoch()));
    ++state_.batch_in_epoch;
    if (batch->size == 0) continue;  // networks on rank groups: nothing of this rank's group in it
    if (sample_log_ && batch->weight > 0)
      sample_log_->record(state_.step + 1, m, state_.epoch, loader_->last_bucket(), *batch);
    totals.samples += batch->weight > 0 ? batch->size : 0;
    if (m == 0) fault_point("step-forward", strategy_->rank(), state_.step + 1);
    // optimizer.state host: the last micro-batch's gradients go to the host as each is whole, where
    // nothing reduces them after backward; earlier micro-batches' accumulate on the device.
    if (masters_ != nullptr) masters_->stream_micro_batch(m + 1 == count && strategy_->unit_gradients_final());
    const StepOutput out =
        strategy_->micro_step(*model_, *batch, {m, count, m + 1 == count, &precision_, phase, batch->weight});
    // Each micro-batch by its weight in the step (1 but under networks on rank groups, where a
    // rank's share varies): the mean over ranks is then the step's mean over its samples.
    auto weighted = [&](const at::Tensor& value) {
      const at::Tensor v = value.detach().to(at::kDouble);
      return batch->weight == 1.0 ? v : v * batch->weight;
    };
    const at::Tensor loss = weighted(out.loss);
    loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
    for (const auto& [name, value] : out.metrics) {
      const at::Tensor v = weighted(value);
      auto it = metric_sums.find(name);
      if (it == metric_sums.end()) metric_sums.emplace(name, v);
      else it->second = it->second + v;
    }
    for (const auto& [name, mean] : out.sample_means) {  // read at the end: no device sync a micro-batch
      auto& [sum, samples] = mean_sums[name];
      at::Tensor s = mean.sum.detach().to(at::kDouble), n = mean.count.detach().to(at::kDouble);
      if (batch->weight == 0) s = s * 0, n = n * 0;  // a stand-in sample counts for nothing, under its name
      sum = sum.defined() ? sum + s : s;
      samples = samples.defined() ? samples + n : n;
    }
  }
  fault_point("step-gradients", strategy_->rank(), state_.step + 1);
  strategy_->before_optimizer_step(*model_);
  totals.loss = loss_sum.item<double>() / count;
  for (const auto& [name, sum] : metric_sums) totals.metrics[name] = sum.item<double>() / count;
  for (const auto& [name, mean] : mean_sums)
    totals.sample_means[name] = {mean.first.item<double>(), mean.second.item<double>()};
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
    fault_point("step-optimizer", strategy_->rank(), state_.step + 1);
    optimizer_->step();
    optimizer_->update_averages(state_.step + 1);
    if (masters_ != nullptr) masters_->publish();
  }
  precision_.update(overflow);
  if (precision_.scales_loss()) state_.loss_scaler = precision_.scaler();
}

fs::path Trainer::save_checkpoint() {
  state_.samples_in_epoch = loader_->samples_before(state_.epoch, state_.batch_in_epoch);
  if (sample_log_) sample_log_->flush();
  fs::path path;
  if (strategy_->partial_state()) {  // every rank writes its pieces, in collective phases
    StatePieces pieces = strategy_->state_pieces(trained_, optimizer_->adamw());
    check_averages_written(pieces);
    path = checkpoints_.save_pieces(state_, std::move(pieces), *strategy_, settings_.checkpoint.keep_last);
  } else {
    strategy_->barrier();
    path = strategy_->is_main() ? checkpoints_.save(state_, trained_, optimizer_->adamw(), settings_.checkpoint.keep_last)
                                : checkpoints_.folder() / fmt::format("step-{:08d}", state_.step);
    strategy_->barrier();
  }
  spdlog::debug("checkpoint written: {}", path.string());
  last_checkpoint_ = path;
  return path;
}

Trainer::Gradients Trainer::settle_gradients(const MicroBatchTotals& totals) {
  Gradients out;
  const std::string stray = stray_gradient(totals.phase);  // before the masters take the gradients
  if (masters_ != nullptr) masters_->take_gradients();  // bf16 gradients -> the fp32 masters'
  // fp16: gradients back to their true scale; an overflow skips the step (the scaler's job, not
  // the NaN guard's).
  out.loss_scale = precision_.scaler().scale;
  out.overflow = precision_.unscale_and_check(optimizer_->parameters());
  // Ranks holding part of the gradients (fsdp's shards, a network's) see overflow in theirs only:
  // all skip together.
  if (precision_.scales_loss() && strategy_->partial_state())
    out.overflow = strategy_->all_reduce({out.overflow ? 1.0 : 0.0}, Reduce::Max).at(0) > 0;
  const double clip =
      settings_.trainer.grad_clip > 0 ? settings_.trainer.grad_clip : std::numeric_limits<double>::infinity();
  out.grad_norm = out.overflow ? INFINITY : strategy_->clip_gradients(optimizer_->parameters(), clip);
  out.decision = agree(totals.loss, out.grad_norm, out.overflow, !stray.empty());
  if (out.decision.stray_rank >= 0) stop_on_stray_gradient(out.decision, stray, totals.phase);
  if (out.decision.nonfinite_rank >= 0) stop_on_nonfinite(out.decision, totals.loss, out.grad_norm);
  return out;
}

TrainingResult Trainer::fit(const Checkpoint* checkpoint) {
  set_up(checkpoint);
  const std::int64_t total = plan_->total_steps();
  const CpuMemoryCacheScope memory_cache(strategy_->device(), settings_.trainer.cpu_memory_cache_mb);
  StopSignal stop;
  const auto started = std::chrono::steady_clock::now();
  TrainingResult result;
  bool saved = checkpoint != nullptr;  // the checkpoint of the current step is on disk
  if (state_.step >= total) {  // resumed at or past the end: the checkpoint stands as it is
    result.already_complete = true;
    finish(saved, started, result);
    return result;
  }
  loader_->start_epoch(state_.epoch, state_.batch_in_epoch);
  validate_at_start();

  while (state_.step < total) {
    const auto step_started = std::chrono::steady_clock::now();
    profiler_->before_step(state_.step + 1);
    MicroBatchTotals totals = run_micro_batches();
    if (network_load_)
      totals.metrics.merge(
          network_load_->step(*strategy_, totals.samples, seconds_since(step_started), totals.job_samples));
    const Gradients gradients = settle_gradients(totals);
    const double lr = plan_->learning_rate(state_.step);
    apply_update(gradients.overflow, lr);
    ++state_.step;
    profiler_->after_step(state_.step);
    const int signal = gradients.decision.signal;
    const bool periodic = settings_.checkpoint.every > 0 && state_.step % settings_.checkpoint.every == 0;
    const bool checkpoint_due = periodic || signal != 0 || state_.step == total;
    strategy_->after_optimizer_step(*model_, {state_.step, !gradients.overflow, checkpoint_due, &optimizer_->adamw()});
    report_step(totals, gradients, lr, seconds_since(step_started), signal != 0, result);
    saved = checkpoint_due;
    if (checkpoint_due) save_checkpoint();
    if (signal != 0) {
      result.stop_signal = signal;
      break;
    }
  }
  finish(saved, started, result);
  return result;
}

void Trainer::finish(bool saved, std::chrono::steady_clock::time_point started, TrainingResult& result) {
  profiler_->finish();
  if (!saved) save_checkpoint();
  if (sample_log_) sample_log_->flush();
  result.skipped_samples =
      static_cast<std::int64_t>(strategy_->all_reduce({static_cast<double>(loader_->skipped())}, Reduce::Sum).at(0));
  progress_->finish();
  loggers_.flush();
  result.final_step = state_.step;
  result.phased = phases_.declared();
  result.last_checkpoint = last_checkpoint_;
  result.wall_seconds = seconds_since(started);
  result.peak_memory_mib = peak_memory_mib();
  result.peak_gpu_memory_mib = peak_gpu_memory_mib(strategy_->device());
}

}  // namespace wanfw
