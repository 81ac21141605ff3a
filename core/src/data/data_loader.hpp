#pragma once
// Internal: one rank's micro-batches in the sampler's order, made by worker threads ahead of use.
//
// A worker reads each sample (data sets memory-map their shards), checks its shapes against the
// fields the model declared, applies caption dropout from the sample's own random stream, and
// copies each sample once into its row of the batch — converting dtypes (CPU training) and
// checking for NaN/Inf in the same pass, zero-padding text to the batch's longest. Batch memory
// is recycled (batch_buffers.hpp); for a CUDA device it is pinned so that the copy to the device
// does not block. The order is the sampler's
// whatever the number of workers; an epoch can start at any micro-batch (an exact resume).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sampling/bucket_sampler.hpp"
#include "wanfw/data.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parallel/network_groups.hpp"

namespace wanfw {

class BatchBuffers;

class DataLoader {
 public:
  struct Options {
    int rank = 0;
    int workers = 0;         ///< 0: batches are made on the calling thread
    int prefetch = 2;        ///< batches made ahead, per worker
    std::uint64_t seed = 0;  ///< the batches' random-stream seed (Batch::seed)
    std::vector<FieldSpec> fields;  ///< what every sample must carry (empty: taken as it comes)
    double caption_dropout = 0;     ///< probability that a sample's caption is the empty one
    bool skip_bad_samples = false;  ///< a DataError skips the sample (logged, counted) instead of stopping
    bool pin_memory = false;        ///< pin batches for non-blocking copies to a CUDA device
    /// Convert fields to their declared dtypes in the workers (CPU training); otherwise they keep
    /// their stored dtype and Batch::to converts them on the device (half the bytes to copy).
    bool convert = true;
    /// Networks on rank groups (wanfw/parallel/network_groups.hpp; sizes empty: none): each micro-batch of
    /// every rank is dealt by its samples' routes (`route`: Model::route) to this rank's group.
    NetworkGroups groups{};
    std::function<std::vector<int>(const Batch& keys)> route{};
  };
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const BucketSampler> sampler, Options options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts `epoch` at micro-batch `first_batch` of this rank (non-zero when resuming mid-epoch).
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0);
  /// The next micro-batch, or nothing at the end of the epoch. The batch carries its samples'
  /// ids, the epoch and the seed.
  std::optional<Batch> next();
  /// This rank's micro-batches per epoch: the sampler's steps x the accumulation.
  std::int64_t batches_per_epoch() const;
  /// The bucket of the batch next() returned last.
  const Bucket& last_bucket() const { return last_bucket_; }
  /// Samples skipped as bad (data.on_bad_sample: skip), this process, since the loader was made.
  std::int64_t skipped() const { return skipped_.load(); }
  const BucketSampler& sampler() const { return *sampler_; }
  /// Samples of all ranks together in the first `batch` micro-batches of `epoch` (a position
  /// that does not depend on the layout), and back: the micro-batch that follows exactly
  /// `samples` samples, or nothing when no step ends there.
  std::int64_t samples_before(std::int64_t epoch, std::int64_t batch) const;
  std::optional<std::int64_t> batch_after(std::int64_t epoch, std::int64_t samples) const;

 private:
  Batch make_batch(std::int64_t batch_index);
  /// This rank's samples of micro-batch `micro` of `step`, their places in the step's batch, and
  /// their weight in the step's loss.
  struct RankSamples {
    std::vector<std::int64_t> ids, positions;
    double weight = 1.0;
  };
  RankSamples rank_samples(const BucketSampler::StepBatch& step, int micro) const;
  /// Sample `index` with its shapes checked, caption dropped out when its stream says so.
  Sample load_sample(std::int64_t index, const Bucket& bucket);
  /// A bad sample: thrown, or with data.on_bad_sample: skip, logged and counted.
  void refuse(const DataError& error);
  void stop_workers();
  void work();

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const BucketSampler> sampler_;
  Options options_;
  std::shared_ptr<BatchBuffers> buffers_;  ///< batch memory, recycled
  std::vector<std::string> padded_;  ///< fields whose first dimension is dim::tokens
  std::map<std::string, at::ScalarType> declared_dtypes_;
  Sample empty_caption_;             ///< conformed once (caption dropout)
  std::vector<BucketSampler::StepBatch> steps_;  ///< this epoch's steps (from the sampler)
  std::int64_t epoch_ = 0;
  Bucket last_bucket_;
  std::atomic<std::int64_t> skipped_{0};

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::int64_t, Batch> ready_;
  std::map<std::int64_t, std::exception_ptr> failed_;
  std::int64_t next_to_make_ = 0;
  std::int64_t next_to_take_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace wanfw
