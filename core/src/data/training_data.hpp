#pragma once
// Internal: the data of a run in one place: the training set (built by the data set plugin), the
// held-out validation set, the sampler that deals them into steps, and the loaders and batches
// drawn from them. Every batch carries its samples' ids, epoch and stream seed, which key the
// model's random draws (wanfw/sample_random.hpp).

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "config/core_sections.hpp"
#include "sampling/bucket_sampler.hpp"
#include "data/data_loader.hpp"
#include "wanfw/data.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

class TrainingData {
 public:
  /// `training`: the data set plugin's set; `fields`: what the model declared; `data_section`: where
  /// the config's data section was written (errors about it point there); `preview_prompts`: the
  /// set validation.preview_prompts names (its samples carry prompt_fields), or null. Builds the
  /// validation set when the run validates.
  TrainingData(const CoreSettings& settings, std::vector<FieldSpec> fields, std::shared_ptr<Dataset> training,
               SourceLocation data_section, std::shared_ptr<Dataset> preview_prompts = nullptr);

  /// What a preview prompt carries: the model's fields but `latents` (the model takes the shape of
  /// its video from elsewhere).
  static std::vector<FieldSpec> prompt_fields(const std::vector<FieldSpec>& fields);

  const std::shared_ptr<Dataset>& training_set() const { return training_; }
  /// Null when the run does not validate.
  const std::shared_ptr<Dataset>& validation_set() const { return validation_; }
  const std::vector<FieldSpec>& fields() const { return fields_; }

  /// How the training set is dealt into optimizer steps on `world_size` ranks with `accumulation`
  /// micro-batches each.
  std::shared_ptr<BucketSampler> sampler(int world_size, int accumulation) const;
  /// This rank's micro-batches of the training set; `device` is where they will be used (pinned
  /// memory for CUDA).
  /// `groups` and `route`: networks on rank groups (wanfw/parallel/network_groups.hpp; sizes empty: none).
  std::unique_ptr<DataLoader> loader(int rank, int world_size, int accumulation, const c10::Device& device,
                                     const NetworkGroups& groups = {},
                                     std::function<std::vector<int>(const Batch&)> route = {}) const;

  /// This rank's share of the validation set, as batches of validation.batch_size, each from one
  /// bucket (every rank gets as many).
  std::vector<std::vector<std::int64_t>> validation_batches(int rank, int world_size) const;
  /// Validation samples `indices` (one bucket) as one batch: keyed by the validation seed at
  /// epoch 0, so every validation draws the same noise for a sample.
  Batch validation_batch(const std::vector<std::int64_t>& indices) const;
  /// How many samples a preview shows: validation.preview_samples, at most the prompts of
  /// validation.preview_prompts or else the held-out samples.
  std::int64_t preview_count() const;
  /// Preview `i` as a batch of one: prompt i of validation.preview_prompts, else held-out sample i
  /// (keyed like validation_batch).
  Batch preview_batch(std::int64_t i) const;
  /// Its name in tags and files: prompt-<i>, else sample-<i>.
  std::string preview_name(std::int64_t i) const;
  /// Up to `count` samples from the start of the training set that share the first sample's
  /// bucket, as one batch (conditioning for `wanfw sample`).
  Batch first_training_samples(std::int64_t count) const;
  /// first_training_samples(count) `batch` samples at a time: their batch from the sample at
  /// `start` in that order (fewer at the end).
  Batch first_training_samples(std::int64_t count, std::int64_t start, std::int64_t batch) const;

 private:
  Batch batch_of(const Dataset& dataset, const std::vector<std::int64_t>& indices, std::uint64_t seed,
                 const std::vector<FieldSpec>& fields) const;

  CoreSettings settings_;
  std::vector<FieldSpec> fields_;
  SourceLocation data_section_;
  std::shared_ptr<Dataset> training_;
  std::shared_ptr<Dataset> validation_;
  std::shared_ptr<Dataset> preview_prompts_;
};

}  // namespace wanfw
