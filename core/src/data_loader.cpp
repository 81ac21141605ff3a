#include "data_loader.hpp"

namespace wanfw {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler, Options options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {}

DataLoader::~DataLoader() { stop_workers(); }

std::int64_t DataLoader::batches_per_epoch() const {
  const auto n = static_cast<std::int64_t>(sampler_->indices().size());
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
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
  sampler_->set_epoch(epoch);
  epoch_ = epoch;
  indices_ = sampler_->indices();
  ready_.clear();
  failed_.clear();
  next_to_make_ = next_to_take_ = first_batch;
  stopping_ = false;
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { work(); });
}

Batch DataLoader::make_batch(std::int64_t batch_index) const {
  const auto begin = static_cast<std::size_t>(batch_index * options_.batch_size);
  const auto end = std::min(indices_.size(), begin + static_cast<std::size_t>(options_.batch_size));
  std::vector<std::map<std::string, at::Tensor>> samples;
  samples.reserve(end - begin);
  for (std::size_t i = begin; i < end; ++i) samples.push_back(dataset_->get(indices_[i]));
  Batch batch = collate(samples);
  batch.sample_ids.assign(indices_.begin() + static_cast<std::ptrdiff_t>(begin),
                          indices_.begin() + static_cast<std::ptrdiff_t>(end));
  batch.epoch = epoch_;
  batch.seed = options_.seed;
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
