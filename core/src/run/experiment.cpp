// `wanfw run`: one experiment from its config to its last checkpoint, top to bottom.

#include "run/experiment.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_store.hpp"
#include "checkpoint/run_directory.hpp"
#include "memory/host_memory.hpp"
#include "reporting/logger_set.hpp"
#include "reporting/progress.hpp"
#include "run/experiment_assembly.hpp"
#include "train/master_weights.hpp"
#include "train/trainer.hpp"
#include "units/block_swap.hpp"
#include "wanfw/parallel/distributed.hpp"
#include "wanfw/version.hpp"

namespace wanfw {

namespace {

/// "loss 1.80 (mean of steps 1-25) -> 0.953 (steps 276-300), 0.53x": how the logged loss moved.
std::string loss_movement(const TrainingResult& result) {
  if (!result.first_logged) return "no step logged";
  const auto window = [](const LoggedLoss& w) {
    return w.first_step == w.last_step ? fmt::format("step {}", w.last_step)
                                       : fmt::format("steps {}-{}", w.first_step, w.last_step);
  };
  const LoggedLoss& first = *result.first_logged;
  const LoggedLoss& last = *result.last_logged;
  if (first.last_step == last.last_step) return fmt::format("loss {:.4g} (mean of {})", first.loss, window(first));
  return fmt::format("loss {:.4g} (mean of {}) -> {:.4g} ({}), {:.2f}x", first.loss, window(first), last.loss,
                     window(last), last.loss / first.loss);
}

void log_summary(const TrainingResult& result, const RunDirectory& run_dir) {
  if (result.stop_signal != 0)
    spdlog::warn("stopped by signal {} at step {}; checkpoint written; continue with --resume auto",
                 result.stop_signal, result.final_step);
  if (result.already_complete) {  // the trainer said why at the start
    spdlog::info("done: no step trained; the run stays at step {}", result.final_step);
  } else {
    std::string memory = fmt::format("peak memory {:.0f} MiB", result.peak_memory_mib);
    if (result.peak_gpu_memory_mib > 0) memory += fmt::format(" (GPU {:.0f} MiB)", result.peak_gpu_memory_mib);
    spdlog::info("done: {} steps in {} | {:.1f} samples/s | {}", result.final_step,
                 format_duration(result.wall_seconds),
                 static_cast<double>(result.samples) / std::max(result.wall_seconds, 1e-9), memory);
    spdlog::info("{}{}", loss_movement(result),
                 result.phased ? " (the training phases' losses mixed; each phase's is logged as <phase>/loss)" : "");
  }
  if (result.skipped_samples > 0)
    spdlog::warn("{} bad sample(s) were skipped (data.on_bad_sample: skip); `wanfw data verify` lists them",
                 result.skipped_samples);
  if (result.last_checkpoint) spdlog::info("last checkpoint: {}", result.last_checkpoint->string());
  spdlog::info("outputs: {}", run_dir.path().string());
}

/// The ranks each sharing one model's state: a sharding strategy's shard group (its network's group,
/// or the job), else 1 (each rank holds the whole model's).
int state_shard_ranks(const Strategy& strategy) {
  if (!strategy.shards_state()) return 1;
  if (const NetworkGroups* groups = strategy.network_groups()) return groups->group_size();
  return strategy.world_size();
}

}  // namespace

RunOutcome run_experiment(const RunRequest& request) {
  // 1. Config, plugins and data sets.
  Experiment e = assemble(request);
  Strategy& strategy = *e.strategy;
  const bool main = strategy.is_main();

  // 2. The run folder: every rank picks it before the main one creates it, so they all pick the same.
  const RunDirectory run_dir = RunDirectory::choose(e.settings.run, request.resume);
  strategy.barrier();
  if (main) {
    spdlog::info("wanfw {} | LibTorch {} | CPU {} | strategy: {}", version(), host_torch_version(),
                 host_cpu_vector_unit(), strategy.describe());
    run_dir.create(e.resolved_yaml);
    spdlog::info("run folder: {}", run_dir.path().string());
  }

  // 3. bf16_weights: the trainable weights in bf16, fp32 masters beside them; optimizer.state host:
  //    the fp32 masters in host memory. Both before the strategy hooks the parameters. Then the
  //    weights to resume from (into the masters when there are any) before the strategy places
  //    the model, so that every replica and rank starts from them; the optimizer and loop state
  //    follow in Trainer::fit.
  //    A strategy that shards the state keeps its own shards on the host (it declares
  //    StrategyCapabilities::host_state): each rank then holds its share of the model's.
  std::unique_ptr<MasterWeights> masters;
  const bool bf16_weights = e.settings.precision.mode == PrecisionMode::BF16Weights;
  const bool host_state = e.settings.optimizer.state == OptimizerStateHome::Host;
  if (host_state)
    require_host_memory(host_state_bytes(*e.model, e.settings.ema) / state_shard_ranks(strategy),
                        detect_launch(process_environment(), /*default_port=*/29500).local_world_size,
                        "optimizer.state host (fp32 masters, their gradients, AdamW moments and averages)",
                        "free host memory, train adapters instead of the whole model, or keep the state on the "
                        "device (optimizer.state device)");
  if (bf16_weights || (host_state && !strategy.shards_state()))  // bf16_weights with sharding: refused in assemble
    masters = std::make_unique<MasterWeights>(*e.model, bf16_weights ? std::optional(at::kBFloat16) : std::nullopt,
                                              e.settings.optimizer.state, strategy.device());
  if (run_dir.checkpoint()) {
    run_dir.checkpoint()->load_weights(masters ? masters->view() : *e.model);
    if (masters) masters->publish();
  }
  place_model(e);
  if (masters) masters->stream_gradients();  // after placement: the parameters' accumulators are final
  if (masters && e.block_swap)  // trained weights block swap streams: the masters go into its host copies
    masters->keep_streamed([swap = e.block_swap](const at::Tensor& p) { return swap->host_copy(p); },
                           [swap = e.block_swap] { swap->invalidate(); });

  // 4. Train, logging on the main process.
  LoggerSet loggers(e.loggers, main, run_dir.path(), run_dir.resume_step(), e.resolved_yaml);
  Trainer trainer(e.settings, e.resolved_yaml, e.model, e.strategy, *e.data, loggers, run_dir.path(), masters.get());
  if (main && e.settings.validation.preview)
    trainer.set_preview_decoder([&e] {
      PluginContext context;
      context.seed = e.settings.run.seed;
      context.device = context.train_device = e.strategy->device();
      return e.host->make_decoder(e.config, "model", context);
    });
  const TrainingResult result = trainer.fit(run_dir.checkpoint().get());
  if (e.block_swap && main)
    spdlog::info("{}", e.block_swap->summary(result.final_step - run_dir.resume_step()));
  loggers.close();
  if (main) log_summary(result, run_dir);

  RunOutcome outcome;
  outcome.run_dir = run_dir.path();
  outcome.final_step = result.final_step;
  outcome.stop_signal = result.stop_signal;
  outcome.last_checkpoint = result.last_checkpoint;
  return outcome;
}

}  // namespace wanfw
