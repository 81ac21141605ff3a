#pragma once
// Internal: the checkpoints of one run.
//
//   <run_dir>/checkpoints/step-00000100/
//     model.safetensors       the model's checkpoint tensors (every parameter and buffer, or a
//                             LoRA run's adapters), under the model's own names
//     optimizer.safetensors   AdamW moments and step counts, keyed by parameter name
//     rng.safetensors         every generator state (CPU, each CUDA device)
//     trainer_state.json      step, epoch, data position, versions, the resolved config
//
// A strategy that shards the training state (fsdp) writes model.safetensors and
// optimizer.safetensors in pieces instead, a file a rank, with an index each
// (state_piece_files.hpp has the layout).
//
// A checkpoint is written into a temporary folder and renamed into place, so a folder named
// step-* is always complete.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <torch/optim/adamw.h>

#include "checkpoint/trainer_state_file.hpp"
#include "wanfw/model.hpp"
#include "wanfw/precision.hpp"
#include "wanfw/strategy.hpp"

namespace wanfw {

/// Writes, lists and prunes the checkpoints of one run; checkpoint.hpp reads one.
class CheckpointStore {
 public:
  static constexpr const char* kStateFile = "trainer_state.json";
  static constexpr const char* kModelFile = "model.safetensors";
  static constexpr const char* kOptimizerFile = "optimizer.safetensors";
  static constexpr const char* kGeneratorFile = "rng.safetensors";

  explicit CheckpointStore(std::filesystem::path run_dir);

  const std::filesystem::path& folder() const { return folder_; }
  /// Writes a checkpoint for `state.step` and prunes all but the newest `keep_last` (0 keeps
  /// all). Returns its folder.
  std::filesystem::path save(const TrainerState& state, Model& model, torch::optim::AdamW& optimizer,
                             std::int64_t keep_last);
  /// The same, written by every rank together: each its `pieces`, the main process the indexes,
  /// the generators and the trainer state. A collective (every rank calls it); a failure on any
  /// rank (a full disk) fails every rank, that one with its error and the others naming it.
  std::filesystem::path save_pieces(const TrainerState& state, const StatePieces& pieces, Strategy& strategy,
                                    std::int64_t keep_last);
  /// Complete checkpoints, oldest first.
  std::vector<std::filesystem::path> list() const;
  std::optional<std::filesystem::path> latest() const;

  /// True if `folder` looks like a complete checkpoint.
  static bool is_checkpoint(const std::filesystem::path& folder);
  /// The step a checkpoint folder's name (step-N) gives; `checkpoint` must pass is_checkpoint.
  static std::int64_t step_of(const std::filesystem::path& checkpoint);

 private:
  /// Creates `temp` afresh, and removes what an earlier kill left aside.
  void prepare(const std::filesystem::path& temp) const;
  /// The generators and the trainer state into `temp`, every file checked (`piece_world` ranks
  /// wrote the tensors in pieces; 0: whole files), then `temp` renamed to `final_path` and all but
  /// the newest `keep_last` checkpoints pruned.
  void complete(const TrainerState& state, const std::filesystem::path& temp, const std::filesystem::path& final_path,
                std::int64_t keep_last, int piece_world) const;
  /// Deletes an old checkpoint: out of the checkpoints' names first, then its files.
  void discard(const std::filesystem::path& checkpoint) const;

  std::filesystem::path folder_;
};

}  // namespace wanfw
