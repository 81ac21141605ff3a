#pragma once
// Internal: one checkpoint folder (checkpoint_store.hpp has its layout), opened once. Opening
// reads and validates trainer_state.json; each tensor file is memory-mapped only when its part is
// restored, and no file is read twice: the run directory's choice (the resume step), the weights
// (before the strategy places the model) and the trainer's restore (optimizer, generators) all
// come from one handle.

#include <bit>
#include <filesystem>
#include <memory>

#include <torch/optim/adamw.h>

#include "checkpoint/checkpoint_store.hpp"
#include "wanfw/model.hpp"
#include "wanfw/strategy.hpp"

namespace wanfw {

class Checkpoint {
 public:
  /// Reads `folder`/trainer_state.json and checks every field (types, ranges, the loss scaler)
  /// and that its step is the one a step-N folder names.
  /// Throws FileError naming the file and the field at fault.
  static std::shared_ptr<const Checkpoint> open(const std::filesystem::path& folder);

  const std::filesystem::path& folder() const { return folder_; }
  /// The loop's position when the checkpoint was written, as validated on opening.
  const TrainerState& state() const { return state_; }

  /// Restores the model's checkpoint tensors (Model::checkpoint_tensors): every one present
  /// with its shape, each passed through the tensor gate, none left over. Reads a checkpoint
  /// written whole or in pieces (state_piece_files.hpp) alike.
  void load_weights(Model& model) const;
  /// Restores the optimizer's state (keyed by `model`'s trainable parameter names; through
  /// `strategy` when it shards the state) and then every generator's state, so that nothing
  /// consumes random numbers after the restore.
  void load_training_state(Model& model, torch::optim::AdamW& optimizer, Strategy& strategy) const;

  /// How many of the folder's files this handle has read, the trainer state included. Each is
  /// read at most once: restoring a part a second time throws std::logic_error.
  int files_read() const { return std::popcount(read_); }

 private:
  explicit Checkpoint(std::filesystem::path folder) : folder_(std::move(folder)) {}
  /// `file` of the folder, recorded as read; throws std::logic_error if it was.
  std::filesystem::path take(const char* file, unsigned bit) const;
  void load_optimizer(Model& model, torch::optim::AdamW& optimizer, Strategy& strategy) const;
  void load_generators() const;

  std::filesystem::path folder_;
  TrainerState state_;
  mutable unsigned read_ = 0;  ///< one bit a file
};

}  // namespace wanfw
