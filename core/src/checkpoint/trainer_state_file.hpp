#pragma once
// Internal: trainer_state.json, the loop's position a checkpoint saves, and its reader: the one
// file of a checkpoint that is JSON, read on every resume, so every field is checked before use.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "wanfw/precision.hpp"

namespace wanfw {

/// The loop's position, saved with every checkpoint.
struct TrainerState {
  std::int64_t step = 0;            ///< optimizer steps completed
  std::int64_t epoch = 0;           ///< current epoch
  std::int64_t batch_in_epoch = 0;  ///< micro-batches of `epoch` this process consumed
  /// Samples of `epoch` consumed by all processes together (-1: not recorded). A run resumed on
  /// another layout with the same global batch continues at exactly this position.
  std::int64_t samples_in_epoch = -1;
  std::int64_t world_size = 1;
  std::string config_yaml;
  /// fp16 runs: the dynamic loss scaler.
  std::optional<LossScalerState> loss_scaler;
};

/// The trainer state at `path`: at most 64 MB, JSON nested at most 8 levels, every field present
/// with its type and at or above its least value, a positive finite loss scale. Throws FileError
/// naming the file and the field.
TrainerState read_trainer_state(const std::filesystem::path& path);

}  // namespace wanfw
