#pragma once
// Internal: the training loop, in phases: set-up (trainer_setup.cpp: restore, the loader and its
// position, the ranks' agreement on the epoch, the plan), the steps, the post-step reporting
// (trainer_reporting.cpp), and the finish (the last checkpoint, the result). One optimizer step,
// in order:
//   1. micro-batches: forward and backward of each through the strategy (run_micro_batches)
//   2. agreement: every rank learns whether any saw a stop signal or a non-finite loss or
//      gradient norm (agree), so all take the same branch at the same step
//   3. update: learning rate, optimizer step (or the fp16 skip), strategy hook (apply_update)
//   4. report: the step's values join the logging window; at a logging step the window's means,
//      averaged over ranks, go to the progress line and the loggers, with validation (report)
//   5. checkpoint when due (periodic, last step, or after an agreed stop signal)

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_store.hpp"
#include "config/core_sections.hpp"
#include "data/training_data.hpp"
#include "reporting/logger_set.hpp"
#include "reporting/metric_window.hpp"
#include "reporting/step_profiler.hpp"
#include "plan/phase_schedule.hpp"
#include "plan/training_plan.hpp"
#include "reporting/network_load.hpp"
#include "train/preview_video.hpp"
#include "wanfw/strategy.hpp"

namespace wanfw {

class MasterWeights;
class ProgressReporter;
class SampleLog;
class TrainingOptimizer;
class Validation;

/// A logged window's mean training loss and the steps it spans.
struct LoggedLoss {
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
  double loss = 0;
};

struct TrainingResult {
  std::int64_t final_step = 0;
  int stop_signal = 0;  ///< the signal every rank agreed to stop on (0: ran to the end)
  std::optional<std::filesystem::path> last_checkpoint;
  double wall_seconds = 0;
  std::optional<LoggedLoss> first_logged;  ///< this session's first logged window
  std::optional<LoggedLoss> last_logged;   ///< and its last
  std::int64_t samples = 0;       ///< samples trained on by all processes together, this session
  double peak_memory_mib = 0;     ///< this process's peak resident memory
  double peak_gpu_memory_mib = 0; ///< peak CUDA memory allocated on this process's device (0 on CPUs)
  std::int64_t skipped_samples = 0;  ///< bad samples skipped (data.on_bad_sample: skip), all processes
  bool phased = false;  ///< the model trains in phases: the logged loss mixes theirs
  /// The run resumed at or past its last step (trainer.max_steps, or epochs): nothing trained.
  bool already_complete = false;
};

class Trainer {
 public:
  /// `model` is placed by `strategy` already (its weights loaded, when resuming); the trainer
  /// builds the optimizer over the model's parameter groups. `masters` (precision.mode
  /// bf16_weights; outlives the trainer): the fp32 master weights the optimizer steps and
  /// checkpoints keep instead of the model's bf16 parameters.
  Trainer(const CoreSettings& settings, std::string resolved_yaml, std::shared_ptr<Model> model,
          std::shared_ptr<Strategy> strategy, const TrainingData& data, LoggerSet& loggers,
          std::filesystem::path run_dir, MasterWeights* masters = nullptr);
  ~Trainer();

  /// Trains to the end (or to an agreed stop signal), continuing from `checkpoint`'s optimizer and
  /// trainer state when given.
  TrainingResult fit(const Checkpoint* checkpoint);
  /// Where validation previews get their decoder (null or absent: the model's preview images).
  void set_preview_decoder(DecoderFactory make_decoder) { make_decoder_ = std::move(make_decoder); }

 private:
  /// What one step's micro-batches produced on this process.
  struct MicroBatchTotals {
    double loss = 0;                        ///< mean over the step's micro-batches
    std::map<std::string, double> metrics;  ///< means over the step's micro-batches
    std::map<std::string, std::pair<double, double>> sample_means;  ///< (sum, count) over them
    std::int64_t samples = 0;               ///< this rank's (stand-ins not counted)
    std::int64_t job_samples = -1;          ///< every rank's together; -1: samples x the data world size
    int phase = 0;                          ///< the model's training phase of the step
  };
  /// What every rank agreed on after a step's backward.
  struct Decision {
    int signal = 0;           ///< a stop signal some rank received (0: none)
    int nonfinite_rank = -1;  ///< the lowest rank with a non-finite value (-1: none)
    std::string metric;       ///< "loss" or "grad_norm"
    int stray_rank = -1;      ///< the lowest rank where a parameter outside the step's phase got a gradient
  };

  /// After the micro-batches: the fp16 gradients unscaled, the gradients clipped, and what the
  /// ranks agree on (a non-finite value stops the run here).
  struct Gradients {
    double loss_scale = 1;  ///< the fp16 loss scale the backward ran at
    bool overflow = false;  ///< fp16 overflow: the step is skipped
    double grad_norm = 0;
    Decision decision;
  };

  /// Everything before the first step: restore, the loader and its position in the epoch, the
  /// ranks' agreement on the epoch's length, the plan, the progress line and validation.
  void set_up(const Checkpoint* checkpoint);
  void restore(const Checkpoint& checkpoint);
  /// After a restore: the micro-batch of the epoch that follows the checkpoint's samples.
  void resume_position();
  /// Fails unless every rank's epoch holds as many micro-batches: ends of epochs are collective.
  void agree_on_epoch_length();
  MicroBatchTotals run_micro_batches();
  Gradients settle_gradients(const MicroBatchTotals& totals);
  /// `stray`: a parameter outside the step's phase got a gradient on this rank.
  Decision agree(double loss, double grad_norm, bool overflow, bool stray);
  /// The first parameter outside training phase `phase` that holds a gradient ("" when none).
  std::string stray_gradient(int phase) const;
  [[noreturn]] void stop_on_stray_gradient(const Decision& decision, const std::string& name, int phase) const;
  [[noreturn]] void stop_on_nonfinite(const Decision& decision, double loss, double grad_norm) const;
  /// bf16_weights: every rank's fp32 masters are equal (a collective; a strategy's broadcast of the
  /// starting weights reaches the module's bf16 parameters, not the masters), else an error.
  void check_master_weights();
  /// A strategy that writes its own pieces (`pieces`: this rank's) wrote the run's averages too,
  /// agreed over ranks; else an error naming the strategy.
  void check_averages_written(const StatePieces& pieces);
  void apply_update(bool overflow, double lr);
  /// Adds the step to the logging window; at a logging step (`log_now`) returns the window's
  /// scalars averaged over ranks (a collective), else nothing.
  std::map<std::string, double> report(const MicroBatchTotals& totals, double lr, double grad_norm, bool overflow,
                                       double loss_scale, double step_seconds, bool log_now);
  /// A CUDA run's memory plan beside the peak its first step reserved (Model::planned_device_bytes).
  void log_planned_memory() const;
  /// validation.at_start: before a new run's first step, the held-out scores and previews of the
  /// weights it starts from, logged at step 0 (every rank takes part, as in report_step).
  void validate_at_start();
  /// After the update of step state_.step: the logging window (and at a logging step, or when
  /// the run `stops`, its means to the progress line, the loggers and `result`), validation and
  /// its previews, parameter histograms.
  void report_step(const MicroBatchTotals& totals, const Gradients& gradients, double lr, double step_seconds,
                   bool stops, TrainingResult& result);
  std::filesystem::path save_checkpoint();
  /// After the last step: the final checkpoint unless written, the logs flushed, the totals.
  void finish(bool saved, std::chrono::steady_clock::time_point started, TrainingResult& result);

  CoreSettings settings_;
  std::string resolved_yaml_;
  std::shared_ptr<Model> model_;
  std::shared_ptr<Strategy> strategy_;
  PhaseSchedule phases_;  ///< the model's training phases
  /// Per phase, the trainable parameters of the other phases (which its steps must leave alone).
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> outside_phase_;
  MasterWeights* masters_;
  /// What the optimizer and checkpoints see: the model, or its masters' view (bf16_weights).
  Model& trained_;
  const TrainingData& data_;
  LoggerSet& loggers_;
  CheckpointStore checkpoints_;
  std::filesystem::path run_dir_;
  std::unique_ptr<SampleLog> sample_log_;  ///< data.sample_log: this rank's micro-batches
  std::unique_ptr<DataLoader> loader_;
  std::optional<TrainingPlan> plan_;
  std::unique_ptr<TrainingOptimizer> optimizer_;
  std::unique_ptr<ProgressReporter> progress_;  ///< rank 0's progress line (off elsewhere)
  std::unique_ptr<Validation> validation_;
  DecoderFactory make_decoder_;
  std::unique_ptr<StepProfiler> profiler_;  ///< trainer.profile_steps
  std::optional<NetworkLoad> network_load_;  ///< networks on rank groups: each group's load a step
  MetricWindow window_;  ///< the steps since the last log
  std::int64_t window_first_ = 0;  ///< the logging window's first step
  std::int64_t first_step_ = 0;    ///< the first step this process trains (after a resume: the next one)
  Precision precision_;
  std::int64_t skipped_steps_ = 0;  ///< fp16 steps skipped on overflow, this process
  std::optional<std::filesystem::path> last_checkpoint_;
  std::optional<std::filesystem::path> resumed_from_;  ///< the checkpoint this run resumed from
  TrainerState state_;
};

}  // namespace wanfw
