#pragma once
// Internal: one epoch of a bucketed data set, dealt into optimizer steps, micro-batches and ranks.
//
// Every optimizer step draws all its samples from one bucket: a step batch of
// batch_size(bucket) x world_size x accumulation samples. Micro-batch m of rank r is its slice
// [(m * world_size + r) * b, + b). The order depends on (seed, epoch) only, never on the layout:
// 2 ranks x 2 micro-batches of B and 1 rank x 1 batch of 4B train on the same samples at every step.
//
// Per epoch: each bucket's samples are shuffled (seed, epoch, bucket) and cut into step batches;
// the tail that does not fill one is dropped (drop_last, a different tail each epoch) or completed
// by repeating the bucket's first samples of the epoch; then the step batches of all buckets are
// shuffled together (seed, epoch). Nothing is dropped silently: plan() says what happens to
// every bucket's leftovers, and the trainer prints it.

#include <cstdint>
#include <string>
#include <vector>

#include "wanfw/data.hpp"

namespace wanfw {

class BucketSampler {
 public:
  struct Options {
    int world_size = 1;
    int accumulation = 1;
    std::int64_t batch_size = 1;                  ///< per device and micro-batch
    std::vector<std::int64_t> bucket_batch_size;  ///< per bucket; 0 (or absent): batch_size
    bool shuffle = true;
    bool drop_last = true;
    std::uint64_t seed = 0;
  };
  /// All samples of one optimizer step, from one bucket.
  struct StepBatch {
    std::int64_t bucket = 0;
    std::vector<std::int64_t> samples;
  };
  /// What one epoch does with one bucket.
  struct BucketPlan {
    Bucket bucket;
    std::int64_t samples = 0;     ///< in the data set
    std::int64_t batch_size = 0;  ///< per device and micro-batch
    std::int64_t steps = 0;       ///< optimizer steps it fills each epoch
    std::int64_t leftover = 0;    ///< samples that do not fill a step batch
    std::int64_t repeated = 0;    ///< without drop_last: samples repeated to complete the last step
  };

  BucketSampler(const Dataset& dataset, Options options);

  /// The step batches of `epoch`, in training order.
  std::vector<StepBatch> epoch(std::int64_t epoch) const;
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  /// Micro-batch `micro` of `rank` in `step`.
  std::vector<std::int64_t> micro_batch(const StepBatch& step, int rank, int micro) const;
  /// Micro-batch `micro` of every rank in `step`, in rank order: what one device holding the
  /// whole step batch trains on in that micro-batch.
  std::vector<std::int64_t> micro_batch_of_all(const StepBatch& step, int micro) const;
  const std::vector<BucketPlan>& plan() const { return plan_; }
  /// The plan as lines for the log and `wanfw data inspect`: one per bucket, and a total.
  std::vector<std::string> describe() const;
  const Options& options() const { return options_; }

 private:
  Options options_;
  std::vector<std::vector<std::int64_t>> members_;  ///< each bucket's samples, ascending
  std::vector<BucketPlan> plan_;
  std::int64_t steps_per_epoch_ = 0;
};

}  // namespace wanfw
