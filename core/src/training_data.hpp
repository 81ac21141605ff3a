#pragma once
// Internal: the data sets of a run, built in one place: the training set, the held-out
// validation set, and the loaders and batches drawn from them. Every batch carries its samples'
// ids, epoch and stream seed, which key the model's random draws (wanfw/sample_random.hpp).

#include <cstdint>
#include <memory>
#include <vector>

#include "core_sections.hpp"
#include "data_loader.hpp"
#include "wanfw/data.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

class TrainingData {
 public:
  /// The data sets for a model whose batches carry `fields`; `data_section` is where the config's
  /// data section was written (errors about it point there).
  TrainingData(const CoreSettings& settings, const std::vector<FieldSpec>& fields, SourceLocation data_section);

  const std::shared_ptr<Dataset>& training_set() const { return training_; }
  /// Null when the run does not validate.
  const std::shared_ptr<Dataset>& validation_set() const { return validation_; }

  /// This rank's shard of the training set, in batches of data.batch_size. Throws ConfigError
  /// when an epoch holds fewer micro-batches than one optimizer step needs (`accumulation`).
  std::unique_ptr<DataLoader> loader(int rank, int world_size, int accumulation) const;

  /// Validation samples `indices` as one batch: keyed by the validation seed at epoch 0, so every
  /// validation draws the same noise for a sample.
  Batch validation_batch(const std::vector<std::int64_t>& indices) const;
  /// The first `count` samples of the training set as one batch (conditioning for `wanfw sample`).
  Batch first_training_samples(std::int64_t count) const;

 private:
  CoreSettings settings_;
  SourceLocation data_section_;
  std::shared_ptr<Dataset> training_;
  std::shared_ptr<Dataset> validation_;
};

}  // namespace wanfw
