#include "data/training_data.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace wanfw {

namespace {

/// The held-out set's seed (its samples and its random streams): apart from the training set's.
std::uint64_t validation_seed(std::uint64_t run_seed) { return run_seed ^ 0x5eed'7a11'da7aULL; }

std::vector<std::string> padded_fields(const std::vector<FieldSpec>& fields) {
  std::vector<std::string> names;
  for (const auto& field : fields)
    if (!field.shape.empty() && field.shape.front() == dim::tokens) names.push_back(field.name);
  return names;
}

}  // namespace

TrainingData::TrainingData(const CoreSettings& settings, std::vector<FieldSpec> fields,
                           std::shared_ptr<Dataset> training, SourceLocation data_section,
                           std::shared_ptr<Dataset> preview_prompts)
    : settings_(settings), fields_(std::move(fields)), data_section_(std::move(data_section)),
      training_(std::move(training)), preview_prompts_(std::move(preview_prompts)) {
  if (training_->size() < 1)
    throw DataError(fmt::format("the data set holds no samples ({})", training_->summary()),
                    "check data.path, or the data set plugin's options");
  if (settings_.validation.every > 0) {
    validation_ = training_->validation_set(settings_.validation.num_samples, validation_seed(settings_.run.seed));
    if (!validation_ && !preview_prompts_)  // preview prompts alone: previews without scores
      throw ConfigError(data_section_,
                        fmt::format("validation.every is {}, but the data set has no validation set ({})",
                                    settings_.validation.every, training_->summary()),
                        "give the data set one (latent_shards: validation_path), name validation.preview_prompts "
                        "to preview without scores, or set validation.every: 0");
  }
}

std::shared_ptr<BucketSampler> TrainingData::sampler(int world_size, int accumulation) const {
  const auto& d = settings_.data;
  BucketSampler::Options options{world_size, accumulation, d.batch_size, {}, d.shuffle, d.drop_last, settings_.run.seed};
  const auto& buckets = training_->buckets();
  options.bucket_batch_size.assign(buckets.size(), 0);
  for (const auto& [name, size] : d.bucket_batch_size) {
    bool found = false;
    for (std::size_t b = 0; b < buckets.size(); ++b)
      if (buckets[b].name() == name) {
        options.bucket_batch_size[b] = size;
        found = true;
      }
    if (!found) spdlog::warn("data.bucket_batch_size names bucket {}, which the data set does not have", name);
  }
  return std::make_shared<BucketSampler>(*training_, options);
}

std::unique_ptr<DataLoader> TrainingData::loader(int rank, int world_size, int accumulation, const c10::Device& device,
                                                 const NetworkGroups& groups,
                                                 std::function<std::vector<int>(const Batch&)> route) const {
  const auto& d = settings_.data;
  DataLoader::Options options;
  options.rank = rank;
  options.workers = d.workers;
  options.prefetch = d.prefetch;
  options.seed = settings_.run.seed;
  options.fields = fields_;
  options.caption_dropout = d.caption_dropout;
  options.skip_bad_samples = d.skip_bad_samples;
  options.pin_memory = device.is_cuda();
  options.convert = !device.is_cuda();  // GPUs: bf16 crosses the bus, converted on arrival
  options.groups = groups;
  options.route = std::move(route);
  return std::make_unique<DataLoader>(training_, sampler(world_size, accumulation), std::move(options));
}

std::vector<std::vector<std::int64_t>> TrainingData::validation_batches(int rank, int world_size) const {
  // Every sample once, in order, bucket by bucket; a bucket's last batch completed by repeats so
  // that every rank runs as many batches.
  const BucketSampler sampler(*validation_, {world_size, 1, settings_.validation.batch_size, {}, /*shuffle=*/false,
                                             /*drop_last=*/false, settings_.run.seed});
  std::vector<std::vector<std::int64_t>> batches;
  for (const auto& step : sampler.epoch(0)) batches.push_back(sampler.micro_batch(step, rank, 0));
  return batches;
}

std::vector<FieldSpec> TrainingData::prompt_fields(const std::vector<FieldSpec>& fields) {
  std::vector<FieldSpec> kept;
  for (const auto& field : fields)
    if (field.name != "latents") kept.push_back(field);
  return kept;
}

Batch TrainingData::batch_of(const Dataset& dataset, const std::vector<std::int64_t>& indices, std::uint64_t seed,
                             const std::vector<FieldSpec>& fields) const {
  std::vector<Sample> samples;
  samples.reserve(indices.size());
  for (const std::int64_t index : indices) {
    const Bucket& bucket = dataset.buckets()[static_cast<std::size_t>(dataset.bucket_of(index))];
    Sample sample = dataset.get(index);
    if (!fields.empty()) sample = conform_sample(std::move(sample), fields, bucket, dataset.describe_sample(index));
    samples.push_back(std::move(sample));
  }
  Batch batch = collate(samples, padded_fields(fields));
  batch.sample_ids = indices;
  batch.epoch = 0;
  batch.seed = seed;
  return batch;
}

Batch TrainingData::validation_batch(const std::vector<std::int64_t>& indices) const {
  return batch_of(*validation_, indices, validation_seed(settings_.run.seed), fields_);
}

std::int64_t TrainingData::preview_count() const {
  const Dataset* set = preview_prompts_ ? preview_prompts_.get() : validation_.get();
  return set ? std::min<std::int64_t>(settings_.validation.preview_samples, set->size()) : 0;
}

Batch TrainingData::preview_batch(std::int64_t i) const {
  if (!preview_prompts_) return validation_batch({i});
  return batch_of(*preview_prompts_, {i}, validation_seed(settings_.run.seed), prompt_fields(fields_));
}

std::string TrainingData::preview_name(std::int64_t i) const {
  return fmt::format("{}-{}", preview_prompts_ ? "prompt" : "sample", i);
}

Batch TrainingData::first_training_samples(std::int64_t count) const {
  return first_training_samples(count, 0, count);
}

Batch TrainingData::first_training_samples(std::int64_t count, std::int64_t start, std::int64_t batch) const {
  std::vector<std::int64_t> indices;  // the first `count` of the first bucket, then [start, start + batch) of them
  const std::int64_t bucket = training_->bucket_of(0);
  for (std::int64_t i = 0; i < training_->size() && static_cast<std::int64_t>(indices.size()) < count; ++i)
    if (training_->bucket_of(i) == bucket) indices.push_back(i);
  const auto first = std::min<std::int64_t>(start, std::ssize(indices));
  const auto last = std::min<std::int64_t>(first + batch, std::ssize(indices));
  if (first == last) return {};
  return batch_of(*training_, {indices.begin() + first, indices.begin() + last}, settings_.run.seed, fields_);
}

}  // namespace wanfw
