#include "data/data_loader.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "data/batch_assembly.hpp"
#include "data/batch_buffers.hpp"
#include "sampling/network_dealing.hpp"
#include "data/sample_conform.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wanfw {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const BucketSampler> sampler,
                       Options options)
    : dataset_(std::move(dataset)),
      sampler_(std::move(sampler)),
      options_(std::move(options)),
      // Every batch in flight (made ahead, waiting, in the step) holds a buffer per field.
      buffers_(BatchBuffers::make(static_cast<std::size_t>(std::max(1, options_.workers) *
                                                           (std::max(1, options_.prefetch) + 2) *
                                                           std::max<std::size_t>(1, options_.fields.size())))) {
  for (const auto& field : options_.fields) {
    if (!field.shape.empty() && field.shape.front() == dim::tokens) padded_.push_back(field.name);
    declared_dtypes_[field.name] = field.dtype;
  }
  if (options_.caption_dropout > 0) {
    Sample empty = dataset_->empty_caption();
    if (empty.empty())
      throw DataError(fmt::format("caption dropout needs the empty prompt's embedding, and the data set has none ({})",
                                  dataset_->summary()),
                      "encode the data set with tools/encode_dataset.py (it stores the empty prompt), or set "
                      "data.caption_dropout: 0");
    // Conformed like any sample: only the caption fields are checked, against their specs.
    for (auto& [name, value] : empty) {
      for (const auto& field : options_.fields)
        if (field.name == name)
          empty_caption_.merge(
              conform_sample({{name, value}}, {field}, Bucket{}, "the empty prompt's embedding", options_.convert));
    }
    if (empty_caption_.empty())
      throw DataError("the data set's empty-prompt fields name none of the model's fields",
                      "caption dropout replaces the model's text fields");
  }
}

DataLoader::~DataLoader() { stop_workers(); }

std::int64_t DataLoader::batches_per_epoch() const {
  return sampler_->steps_per_epoch() * sampler_->options().accumulation;
}

std::int64_t DataLoader::samples_before(std::int64_t epoch, std::int64_t batch) const {
  const int accumulation = sampler_->options().accumulation;
  // The current epoch's steps are at hand; another epoch's are dealt again (no copy either way).
  std::vector<BucketSampler::StepBatch> dealt;
  if (epoch != epoch_ || steps_.empty()) dealt = sampler_->epoch(epoch);
  const auto& steps = dealt.empty() ? steps_ : dealt;
  std::int64_t samples = 0;
  for (std::int64_t s = 0; s < batch / accumulation && s < static_cast<std::int64_t>(steps.size()); ++s)
    samples += static_cast<std::int64_t>(steps[static_cast<std::size_t>(s)].samples.size());
  return samples;
}

std::optional<std::int64_t> DataLoader::batch_after(std::int64_t epoch, std::int64_t samples) const {
  const auto steps = sampler_->epoch(epoch);
  std::int64_t seen = 0;
  for (std::size_t s = 0; s <= steps.size(); ++s) {
    if (seen == samples) return static_cast<std::int64_t>(s) * sampler_->options().accumulation;
    if (seen > samples || s == steps.size()) break;
    seen += static_cast<std::int64_t>(steps[s].samples.size());
  }
  return std::nullopt;
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
}

void DataLoader::start_epoch(std::int64_t epoch, std::int64_t first_batch) {
  stop_workers();
  epoch_ = epoch;
  steps_ = sampler_->epoch(epoch);
  ready_.clear();
  failed_.clear();
  next_to_make_ = next_to_take_ = first_batch;
  stopping_ = false;
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { work(); });
}

Sample DataLoader::load_sample(std::int64_t index, const Bucket& bucket) {
  Sample sample = dataset_->get(index);
  if (!options_.fields.empty())
    check_sample_shapes(sample, options_.fields, bucket, [&] { return dataset_->describe_sample(index); });
  if (options_.caption_dropout > 0) {
    // One uniform draw from the sample's own stream: the same decision on any rank or layout.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(
        sample_stream_seed(options_.seed, index, epoch_, "caption_dropout"));
    if (at::rand({1}, generator).item<double>() < options_.caption_dropout)
      for (const auto& [name, value] : empty_caption_) sample[name] = value;
  }
  return sample;
}

void DataLoader::refuse(const DataError& error) {
  if (!options_.skip_bad_samples) throw error;
  ++skipped_;
  spdlog::warn("rank {}: skipped a bad sample (data.on_bad_sample: skip): {}", options_.rank, error.what());
}

DataLoader::RankSamples DataLoader::rank_samples(const BucketSampler::StepBatch& step, int micro) const {
  RankSamples out;
  const auto step_size = static_cast<std::int64_t>(step.samples.size());
  if (options_.groups.sizes.empty()) {
    out.ids = sampler_->micro_batch(step, options_.rank, micro);
    const std::int64_t first = (static_cast<std::int64_t>(micro) * sampler_->options().world_size + options_.rank) *
                               static_cast<std::int64_t>(out.ids.size());
    for (std::size_t i = 0; i < out.ids.size(); ++i) out.positions.push_back(first + static_cast<std::int64_t>(i));
    return out;
  }
  Batch keys;  // every rank's samples of the micro-batch, keyed as the model draws for them
  keys.sample_ids = sampler_->micro_batch_of_all(step, micro);
  keys.size = static_cast<std::int64_t>(keys.sample_ids.size());
  keys.epoch = epoch_;
  keys.seed = options_.seed;
  keys.step_samples = step_size;
  for (std::int64_t i = 0; i < keys.size; ++i) keys.step_positions.push_back(micro * keys.size + i);
  const DealtMicroBatch dealt = deal_to_network(keys.sample_ids, options_.route(keys), options_.groups,
                                                micro + 1 == sampler_->options().accumulation);
  out.ids = dealt.samples;
  for (const std::int64_t place : dealt.places) out.positions.push_back(micro * keys.size + place);
  out.weight = dealt.stand_in ? 0.0
                              : network_batch_weight(static_cast<std::int64_t>(dealt.samples.size()), keys.size,
                                                     sampler_->options().world_size);
  return out;
}

Batch DataLoader::make_batch(std::int64_t batch_index) {
  const int accumulation = sampler_->options().accumulation;
  const auto& step = steps_.at(static_cast<std::size_t>(batch_index / accumulation));
  const Bucket& bucket = sampler_->plan()[static_cast<std::size_t>(step.bucket)].bucket;
  const RankSamples mine = rank_samples(step, static_cast<int>(batch_index % accumulation));
  const std::vector<std::int64_t>& indices = mine.ids;
  double weight = mine.weight;
  if (indices.empty()) {  // networks on rank groups: no sample of this rank's group in the micro-batch
    Batch none;
    none.epoch = epoch_;
    none.seed = options_.seed;
    none.weight = 0;
    none.step = batch_index / accumulation;
    return none;
  }
  // Shapes first (no values read: shards stay mapped), then each sample's bytes once, copied
  // into its row of the batch and checked for NaN/Inf on the way.
  std::vector<Sample> samples;
  std::vector<std::int64_t> ids, positions;
  samples.reserve(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    try {
      samples.push_back(load_sample(indices[i], bucket));
      ids.push_back(indices[i]);
      positions.push_back(mine.positions[i]);
    } catch (const DataError& e) {
      refuse(e);
    }
  }
  std::vector<std::int64_t> kept, kept_positions;
  std::optional<BatchAssembly> assembly;
  if (!samples.empty()) {
    assembly.emplace(samples, padded_, options_.convert ? declared_dtypes_ : std::map<std::string, at::ScalarType>{},
                     buffers_.get(), options_.pin_memory);
    for (std::size_t i = 0; i < samples.size(); ++i) {
      if (const auto bad = assembly->add(samples[i]))
        refuse(nonfinite_error(dataset_->describe_sample(ids[i]), bad->field, bad->count, bad->numel));
      else {
        kept.push_back(ids[i]);
        kept_positions.push_back(positions[i]);
      }
    }
  }
  if (kept.empty())
    throw DataError(fmt::format("rank {}: every sample of micro-batch {} of epoch {} (bucket {}) is bad", options_.rank,
                                batch_index, epoch_, bucket.name()),
                    "run `wanfw data verify` on the data set to list the bad samples");
  Batch batch = assembly->finish();
  // A bad sample skipped under networks on rank groups leaves its weight out of the step's loss.
  if (!options_.groups.sizes.empty())
    weight *= static_cast<double>(kept.size()) / static_cast<double>(indices.size());
  batch.sample_ids = std::move(kept);
  batch.step_positions = std::move(kept_positions);
  batch.step_samples = static_cast<std::int64_t>(step.samples.size());
  batch.step = batch_index / accumulation;
  batch.epoch = epoch_;
  batch.seed = options_.seed;
  batch.weight = weight;
  for (const auto& field : options_.fields)
    if (batch.fields.count(field.name) && batch.fields[field.name].scalar_type() != field.dtype)
      batch.dtypes[field.name] = field.dtype;
  return batch;
}

void DataLoader::work() {
  const std::int64_t total = batches_per_epoch();
  const std::int64_t ahead = std::max(1, options_.workers * options_.prefetch);
  for (;;) {
    std::int64_t index;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || next_to_make_ < next_to_take_ + ahead; });
      if (stopping_ || next_to_make_ >= total) return;
      index = next_to_make_++;
    }
    try {
      Batch batch = make_batch(index);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(index, std::move(batch));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      failed_.emplace(index, std::current_exception());
    }
    changed_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  if (next_to_take_ >= batches_per_epoch()) return std::nullopt;
  const int accumulation = sampler_->options().accumulation;
  last_bucket_ = sampler_->plan()[static_cast<std::size_t>(steps_.at(static_cast<std::size_t>(next_to_take_ / accumulation)).bucket)].bucket;
  if (workers_.empty()) return make_batch(next_to_take_++);
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return ready_.count(next_to_take_) || failed_.count(next_to_take_); });
  if (auto failure = failed_.find(next_to_take_); failure != failed_.end()) std::rethrow_exception(failure->second);
  Batch batch = std::move(ready_.at(next_to_take_));
  ready_.erase(next_to_take_++);
  lock.unlock();
  changed_.notify_all();
  return batch;
}

}  // namespace wanfw
