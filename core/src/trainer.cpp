#include "trainer.hpp"

#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <sys/resource.h>

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "generators.hpp"
#include "lr_schedule.hpp"
#include "progress.hpp"
#include "stop_signal.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace wanfw {

Trainer::Trainer(const CoreSettings& settings, std::string config_yaml, std::shared_ptr<Model> model,
                 std::shared_ptr<Strategy> strategy, std::vector<std::shared_ptr<Logger>> loggers,
                 std::unique_ptr<DataLoader> loader, fs::path run_dir, std::shared_ptr<Dataset> validation_set)
    : settings_(settings),
      config_yaml_(std::move(config_yaml)),
      model_(std::move(model)),
      strategy_(std::move(strategy)),
      loggers_(std::move(loggers)),
      loader_(std::move(loader)),
      run_dir_(std::move(run_dir)),
      validation_set_(std::move(validation_set)),
      checkpoints_(run_dir_),
      precision_(settings_.precision) {
  const auto& o = settings_.optimizer;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::map<const void*, std::string> owner;  // parameter -> its group, to refuse duplicates
  for (auto& group : model_->parameter_groups()) {
    if (group.parameters.empty()) continue;
    if (!(group.lr_scale >= 0) || !std::isfinite(group.lr_scale))
      throw Error(fmt::format("parameter group '{}' has lr_scale {}", group.name, group.lr_scale),
                  "the model plugin must give every group a finite, non-negative lr_scale");
    std::vector<at::Tensor> tensors;
    for (auto& [name, tensor] : group.parameters) {
      const auto [it, fresh] = owner.emplace(tensor.unsafeGetTensorImpl(), group.name);
      if (!fresh)
        throw Error(fmt::format("parameter '{}' is in two parameter groups, '{}' and '{}'", name, it->second, group.name),
                    "the model plugin's parameter_groups() must list each parameter once");
      tensors.push_back(tensor);
      parameters_.push_back(tensor);
    }
    auto options = std::make_unique<torch::optim::AdamWOptions>(o.lr);
    options->betas({group.beta1.value_or(o.beta1), group.beta2.value_or(o.beta2)})
        .eps(o.eps)
        .weight_decay(group.weight_decay.value_or(o.weight_decay));
    groups.emplace_back(std::move(tensors), std::move(options));
    group_names_.push_back(group.name);
    lr_scales_.push_back(group.lr_scale);
  }
  if (parameters_.empty())
    throw Error("the model has no trainable parameters", "check the model plugin's parameter_groups()");
  optimizer_ = std::make_unique<torch::optim::AdamW>(
      std::move(groups), torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  if (strategy_->is_main() && group_names_.size() > 1) {
    std::string line;
    for (std::size_t i = 0; i < group_names_.size(); ++i) {
      const auto& g = static_cast<const torch::optim::AdamWOptions&>(optimizer_->param_groups()[i].options());
      line += fmt::format("{}{} ({} tensors, lr x {:g}, weight decay {:g}, betas {:g}/{:g})", i ? "; " : "",
                          group_names_[i], optimizer_->param_groups()[i].params().size(), lr_scales_[i],
                          g.weight_decay(), std::get<0>(g.betas()), std::get<1>(g.betas()));
    }
    spdlog::info("parameter groups: {}", line);
  }
  state_.world_size = strategy_->world_size();
  state_.config_yaml = config_yaml_;
}

Trainer::~Trainer() = default;

void Trainer::set_learning_rate(double lr) {
  auto& groups = optimizer_->param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i)
    static_cast<torch::optim::AdamWOptions&>(groups[i].options()).lr(lr * lr_scales_[i]);
}

fs::path Trainer::save_checkpoint() {
  strategy_->barrier();
  fs::path path;
  if (strategy_->is_main()) {
    path = checkpoints_.save(state_, *model_, *optimizer_, settings_.checkpoint.keep_last);
    spdlog::debug("checkpoint written: {}", path.string());
  } else {
    path = checkpoints_.folder() / fmt::format("step-{:08d}", state_.step);
  }
  strategy_->barrier();
  return path;
}

std::map<std::string, double> Trainer::validate() {
  const auto started = std::chrono::steady_clock::now();
  const auto& v = settings_.validation;
  // Every rank scores its shard; shards are padded to equal length so every rank runs as many
  // batches as the others (collectives in the strategy stay matched).
  const ShardedSampler shard({validation_set_->size(), strategy_->rank(), strategy_->world_size(),
                              /*shuffle=*/false, /*drop_last=*/false, settings_.run.seed});
  const auto& indices = shard.indices();
  const std::shared_ptr<torch::nn::Module> module = model_->module();
  const bool was_training = module->is_training();
  module->eval();
  torch::NoGradGuard no_grad;
  std::map<std::string, double> sums;
  std::int64_t samples = 0;
  for (std::size_t first = 0; first < indices.size(); first += static_cast<std::size_t>(v.batch_size)) {
    const std::size_t last = std::min(indices.size(), first + static_cast<std::size_t>(v.batch_size));
    std::vector<std::map<std::string, at::Tensor>> items;
    for (std::size_t i = first; i < last; ++i) items.push_back(validation_set_->get(indices[i]));
    const Batch batch = collate(items).to(strategy_->device());
    // The same draws (noise, timesteps) at every validation: seeded by the batch's first sample.
    SeededGenerators seeded(settings_.run.seed ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(indices[first] + 1)));
    for (const auto& [name, value] : model_->validation_step(batch))
      sums["val/" + name] += value.detach().to(at::kDouble).item<double>() * static_cast<double>(batch.size);
    samples += batch.size;
  }
  module->train(was_training);
  for (auto& [name, sum] : sums) sum /= static_cast<double>(std::max<std::int64_t>(samples, 1));
  sums = strategy_->reduce_metrics(std::move(sums));
  if (strategy_->is_main()) {
    std::string line;
    for (const auto& [name, value] : sums) line += fmt::format(" | {} {:.6g}", name, value);
    spdlog::info("validation at step {} ({} samples, {:.1f} s){}", state_.step, validation_set_->size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), line);
  }
  return sums;
}

namespace {

double peak_memory_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

double peak_gpu_memory_mib(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto aggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return static_cast<double>(stats.allocated_bytes[aggregate].peak) / (1024.0 * 1024.0);
}

}  // namespace

void Trainer::log_previews() {
  std::vector<std::map<std::string, at::Tensor>> items = {validation_set_->get(0)};
  const Batch batch = collate(items).to(strategy_->device());
  const std::shared_ptr<torch::nn::Module> module = model_->module();
  const bool was_training = module->is_training();
  module->eval();
  std::map<std::string, at::Tensor> images;
  {
    torch::NoGradGuard no_grad;
    SeededGenerators seeded(settings_.run.seed);
    images = model_->preview(batch, settings_.run.seed);
  }
  module->train(was_training);
  for (const auto& [tag, image] : images)
    for (auto& logger : loggers_) logger->log_image(state_.step, "preview/" + tag, image.cpu());
}

void Trainer::log_histograms() {
  for (const auto& [name, parameter] : model_->trainable_parameters()) {
    const at::Tensor weights = parameter.detach().cpu();
    for (auto& logger : loggers_) logger->log_histogram(state_.step, "weights/" + name, weights);
    if (parameter.grad().defined()) {
      const at::Tensor grads = parameter.grad().detach().cpu();
      for (auto& logger : loggers_) logger->log_histogram(state_.step, "grads/" + name, grads);
    }
  }
}

TrainingResult Trainer::fit(const std::optional<fs::path>& checkpoint) {
  TrainingResult result;
  if (checkpoint) {
    state_ = CheckpointStore::load(*checkpoint, *model_, *optimizer_);
    state_.config_yaml = config_yaml_;
    if (precision_.scales_loss() && state_.loss_scaler) precision_.restore(*state_.loss_scaler);
    if (state_.world_size != strategy_->world_size())
      spdlog::warn("the checkpoint was written by {} processes and resumes on {}; the data order changes",
                   state_.world_size, strategy_->world_size());
    state_.world_size = strategy_->world_size();
    spdlog::info("resumed from {} (step {}, epoch {})", checkpoint->string(), state_.step, state_.epoch);
  }

  const int accumulation = strategy_->accumulation_steps();
  const std::int64_t batches_per_epoch = loader_->batches_per_epoch();
  if (batches_per_epoch < accumulation)
    throw ConfigError({"data", 0, 0},
                      fmt::format("an epoch holds {} micro-batches per rank, fewer than the {} one optimizer step needs",
                                  batches_per_epoch, accumulation),
                      "raise data.num_samples or lower data.batch_size / accumulation");
  const std::int64_t total = settings_.trainer.max_steps > 0
                                 ? settings_.trainer.max_steps
                                 : settings_.trainer.epochs * (batches_per_epoch / accumulation);
  // The peak learning rate, scaled with the global batch when asked.
  const auto& opt = settings_.optimizer;
  const std::int64_t global_batch = strategy_->world_size() * settings_.data.batch_size * accumulation;
  const double reference_batch = static_cast<double>(opt.lr_reference_batch > 0 ? opt.lr_reference_batch
                                                                                  : settings_.data.batch_size);
  const double lr_factor = opt.lr_scaling == "linear" ? global_batch / reference_batch
                           : opt.lr_scaling == "sqrt" ? std::sqrt(global_batch / reference_batch)
                                                      : 1.0;
  const auto& sched = settings_.scheduler;
  const LearningRateSchedule schedule(opt.lr * lr_factor, sched.warmup_steps, total, sched.decay == "cosine",
                                      sched.min_lr_ratio);
  const bool main = strategy_->is_main();
  const std::int64_t log_every = settings_.trainer.log_every;
  ProgressReporter progress(main ? ProgressReporter::mode_from(settings_.trainer.progress)
                                 : ProgressReporter::Mode::Off,
                            state_.step, total, log_every);
  if (main) {
    spdlog::info("world size {} | batch {} per device x {} accumulation = global batch {} | {} steps per epoch | "
                 "precision {}",
                 strategy_->world_size(), settings_.data.batch_size, accumulation, global_batch,
                 batches_per_epoch / accumulation, precision_name(precision_.mode()));
    if (opt.lr_scaling != "none")
      spdlog::info("lr scaled {} with the global batch: {:.6g} x {:.4g} = {:.6g} (reference batch {})", opt.lr_scaling,
                   opt.lr, lr_factor, opt.lr * lr_factor, reference_batch);
    spdlog::info("training {} steps from step {}", total, state_.step);
  }

  StopSignal stop;
  const auto started = std::chrono::steady_clock::now();
  result.best_loss = INFINITY;
  std::optional<fs::path> last_checkpoint = checkpoint;
  std::int64_t last_saved_step = checkpoint ? state_.step : -1;
  loader_->start_epoch(state_.epoch, state_.batch_in_epoch);

  while (state_.step < total) {
    const auto step_started = std::chrono::steady_clock::now();
    // Random draws (noise, timesteps) depend on (seed, rank, step) alone: every rank draws its
    // own, and a resumed run draws what the uninterrupted one would have.
    seed_generators(settings_.run.seed, strategy_->rank(), state_.step);
    optimizer_->zero_grad(/*set_to_none=*/true);
    at::Tensor loss_sum;
    std::map<std::string, at::Tensor> metric_sums;
    std::int64_t samples = 0;
    for (int m = 0; m < accumulation; ++m) {
      std::optional<Batch> batch = loader_->next();
      if (!batch) {
        ++state_.epoch;
        state_.batch_in_epoch = 0;
        loader_->start_epoch(state_.epoch, 0);
        batch = loader_->next();
      }
      ++state_.batch_in_epoch;
      samples += batch->size;
      const StepOutput out =
          strategy_->micro_step(*model_, *batch, {m, accumulation, m + 1 == accumulation, &precision_});
      const at::Tensor loss = out.loss.detach();
      loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
      for (const auto& [name, value] : out.metrics) {
        const at::Tensor v = value.detach().to(at::kDouble);
        auto it = metric_sums.find(name);
        if (it == metric_sums.end()) metric_sums.emplace(name, v);
        else it->second = it->second + v;
      }
    }
    strategy_->before_optimizer_step(*model_);

    const double loss = loss_sum.item<double>() / accumulation;
    // fp16: gradients back to their true scale; an overflow skips the step (the scaler's job,
    // not the NaN guard's).
    const double loss_scale = precision_.scaler().scale;
    const bool overflow = precision_.unscale_and_check(parameters_);
    const double grad_norm =
        overflow ? INFINITY
        : settings_.trainer.grad_clip > 0
            ? torch::nn::utils::clip_grad_norm_(parameters_, settings_.trainer.grad_clip)
            : torch::nn::utils::clip_grad_norm_(parameters_, std::numeric_limits<double>::infinity());
    if (settings_.trainer.nan_guard && (!std::isfinite(loss) || (!overflow && !std::isfinite(grad_norm)))) {
      const bool loss_bad = !std::isfinite(loss);
      const std::string where = last_checkpoint ? fmt::format("the last checkpoint, {}, is intact", last_checkpoint->string())
                                                : std::string("no checkpoint had been written yet");
      throw NonFiniteError(
          fmt::format("step {}: {} is {} (NaN guard); training stopped before the optimizer applied it, and {}",
                      state_.step + 1, loss_bad ? "metric 'loss'" : "metric 'grad_norm'",
                      loss_bad ? loss : grad_norm, where),
          "lower optimizer.lr, enable trainer.grad_clip, or check the data; then resume with --resume auto");
    }
    const double lr = schedule.at(state_.step);
    set_learning_rate(lr);
    if (overflow) {
      if (main)
        spdlog::info("step {}: fp16 gradients overflowed at loss scale {:g}; step skipped, scale now {:g}",
                     state_.step + 1, loss_scale, loss_scale * settings_.precision.backoff_factor);
    } else {
      optimizer_->step();
    }
    precision_.update(overflow);
    if (precision_.scales_loss()) state_.loss_scaler = precision_.scaler();
    ++state_.step;
    const int signal = StopSignal::received();
    const bool periodic = settings_.checkpoint.every > 0 && state_.step % settings_.checkpoint.every == 0;
    const bool checkpoint_due = periodic || signal != 0 || state_.step == total;
    strategy_->after_optimizer_step(*model_, {state_.step, !overflow, checkpoint_due, optimizer_.get()});

    const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_started).count();
    std::map<std::string, double> scalars = {{"loss", loss},
                                             {"lr", lr},
                                             {"grad_norm", grad_norm},
                                             {"step_time", step_seconds},
                                             {"samples_per_sec", samples / std::max(step_seconds, 1e-9)},
                                             {"peak_memory_mb", peak_memory_mib()}};
    if (group_names_.size() > 1)
      for (std::size_t i = 0; i < group_names_.size(); ++i) scalars["lr/" + group_names_[i]] = lr * lr_scales_[i];
    if (strategy_->device().is_cuda()) scalars["peak_gpu_memory_mb"] = peak_gpu_memory_mib(strategy_->device());
    result.samples += samples * strategy_->world_size();
    for (const auto& [name, sum] : metric_sums) scalars[name] = sum.item<double>() / accumulation;
    if (precision_.scales_loss()) {
      scalars["loss_scale"] = loss_scale;
      scalars["skipped_steps"] = (skipped_steps_ += overflow ? 1 : 0);
    }
    scalars = strategy_->reduce_metrics(std::move(scalars));
    scalars["samples_per_sec"] *= strategy_->world_size();
    result.final_loss = scalars.at("loss");
    result.best_loss = std::min(result.best_loss, result.final_loss);

    if (main) progress.update(state_.step, scalars);
    // Validation results go into the step's row when it is a logging step, else into one of their own.
    std::map<std::string, double> logged;
    if (state_.step % log_every == 0 || state_.step == total) logged = scalars;
    const std::int64_t validate_every = settings_.validation.every;
    const bool validating =
        validation_set_ && validate_every > 0 && (state_.step % validate_every == 0 || state_.step == total);
    if (validating) logged.merge(validate());
    if (main && !logged.empty())
      for (auto& logger : loggers_) logger->log_scalars(state_.step, logged);
    if (main && validating && settings_.validation.preview) log_previews();
    if (main && settings_.trainer.histogram_every > 0 && state_.step % settings_.trainer.histogram_every == 0)
      log_histograms();
    if (checkpoint_due) {
      last_checkpoint = save_checkpoint();
      last_saved_step = state_.step;
    }
    if (signal != 0) {
      result.stop_signal = signal;
      break;
    }
  }
  if (last_saved_step != state_.step) last_checkpoint = save_checkpoint();
  progress.finish();
  for (auto& logger : loggers_) logger->flush();
  result.final_step = state_.step;
  result.last_checkpoint = last_checkpoint;
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.peak_memory_mib = peak_memory_mib();
  result.peak_gpu_memory_mib = peak_gpu_memory_mib(strategy_->device());
  if (!std::isfinite(result.best_loss)) result.best_loss = result.final_loss;
  return result;
}

}  // namespace wanfw
