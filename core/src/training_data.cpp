#include "training_data.hpp"

#include <fmt/format.h>

namespace wanfw {

namespace {

/// The held-out set's seed (its samples and its random streams): apart from the training set's.
std::uint64_t validation_seed(std::uint64_t run_seed) { return run_seed ^ 0x5eed'7a11'da7aULL; }

Batch batch_of(const Dataset& dataset, const std::vector<std::int64_t>& indices, std::uint64_t seed) {
  std::vector<std::map<std::string, at::Tensor>> samples;
  samples.reserve(indices.size());
  for (const std::int64_t index : indices) samples.push_back(dataset.get(index));
  Batch batch = collate(samples);
  batch.sample_ids = indices;
  batch.epoch = 0;
  batch.seed = seed;
  return batch;
}

}  // namespace

TrainingData::TrainingData(const CoreSettings& settings, const std::vector<FieldSpec>& fields,
                           SourceLocation data_section)
    : settings_(settings), data_section_(std::move(data_section)) {
  training_ = std::make_shared<SyntheticDataset>(fields, settings_.data.num_samples, settings_.run.seed);
  if (settings_.validation.every > 0)
    validation_ = std::make_shared<SyntheticDataset>(fields, settings_.validation.num_samples,
                                                     validation_seed(settings_.run.seed));
}

std::unique_ptr<DataLoader> TrainingData::loader(int rank, int world_size, int accumulation) const {
  const auto& d = settings_.data;
  auto sampler = std::make_shared<ShardedSampler>(
      ShardedSampler::Options{training_->size(), rank, world_size, d.shuffle, d.drop_last, settings_.run.seed});
  auto loader = std::make_unique<DataLoader>(
      training_, sampler, DataLoader::Options{d.batch_size, d.drop_last, d.workers, d.prefetch, settings_.run.seed});
  if (loader->batches_per_epoch() < accumulation)
    throw ConfigError(data_section_,
                      fmt::format("data: an epoch of {} samples holds {} micro-batches of {} per rank (world size {}), "
                                  "fewer than the {} one optimizer step needs",
                                  training_->size(), loader->batches_per_epoch(), d.batch_size, world_size, accumulation),
                      "raise data.num_samples or lower data.batch_size / the accumulation steps");
  return loader;
}

Batch TrainingData::validation_batch(const std::vector<std::int64_t>& indices) const {
  return batch_of(*validation_, indices, validation_seed(settings_.run.seed));
}

Batch TrainingData::first_training_samples(std::int64_t count) const {
  std::vector<std::int64_t> indices;
  for (std::int64_t i = 0; i < count; ++i) indices.push_back(i);
  return batch_of(*training_, indices, settings_.run.seed);
}

}  // namespace wanfw
