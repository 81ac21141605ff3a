#pragma once
// Internal: the training loop.

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "checkpoint_store.hpp"
#include "core_sections.hpp"
#include "data_loader.hpp"
#include "wanfw/logger.hpp"
#include "wanfw/strategy.hpp"

namespace wanfw {

struct TrainingResult {
  std::int64_t final_step = 0;
  int stop_signal = 0;
  std::optional<std::filesystem::path> last_checkpoint;
  double wall_seconds = 0;
  double final_loss = 0;
  double best_loss = 0;
  std::int64_t samples = 0;       ///< samples trained on by all processes together, this session
  double peak_memory_mib = 0;     ///< this process's peak resident memory
  double peak_gpu_memory_mib = 0; ///< peak CUDA memory allocated on this process's device (0 on CPUs)
};

class Trainer {
 public:
  Trainer(const CoreSettings& settings, std::string config_yaml, std::shared_ptr<Model> model,
          std::shared_ptr<Strategy> strategy, std::vector<std::shared_ptr<Logger>> loggers,
          std::unique_ptr<DataLoader> loader, std::filesystem::path run_dir,
          std::shared_ptr<Dataset> validation_set = nullptr);
  ~Trainer();

  /// Trains to the end (or to a stop signal), resuming from `checkpoint` when given.
  TrainingResult fit(const std::optional<std::filesystem::path>& checkpoint);

 private:
  void set_learning_rate(double lr);
  std::filesystem::path save_checkpoint();
  /// Scores this rank's shard of the validation set; returns "val/<metric>" averaged over
  /// samples and ranks.
  std::map<std::string, double> validate();
  /// Preview images of the model on held-out samples (main process only).
  void log_previews();
  /// Histograms of every trainable parameter and its gradient (main process only).
  void log_histograms();

  CoreSettings settings_;
  std::string config_yaml_;
  std::shared_ptr<Model> model_;
  std::shared_ptr<Strategy> strategy_;
  std::vector<std::shared_ptr<Logger>> loggers_;
  std::unique_ptr<DataLoader> loader_;
  std::filesystem::path run_dir_;
  std::shared_ptr<Dataset> validation_set_;
  CheckpointStore checkpoints_;
  std::vector<at::Tensor> parameters_;  ///< the trainable parameters, in optimizer order
  std::vector<std::string> group_names_;  ///< the model's parameter groups, in optimizer order
  std::vector<double> lr_scales_;         ///< each group's learning-rate multiplier
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  Precision precision_;
  std::int64_t skipped_steps_ = 0;  ///< fp16 steps skipped on overflow, this process
  TrainerState state_;
};

}  // namespace wanfw
