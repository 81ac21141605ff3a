#pragma once
// Internal: batches in sampler order, produced by worker threads ahead of use.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "wanfw/data.hpp"

namespace wanfw {

class DataLoader {
 public:
  struct Options {
    std::int64_t batch_size = 1;
    bool drop_last = true;  ///< drop the epoch's final incomplete batch
    int workers = 0;        ///< 0: batches are made on the calling thread
    int prefetch = 2;       ///< batches made ahead, per worker
    std::uint64_t seed = 0;  ///< the batches' random-stream seed (Batch::seed)
  };
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler, Options options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts `epoch` at batch `first_batch` (non-zero when resuming mid-epoch).
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0);
  /// The next batch, or nothing at the end of the epoch. The order is the sampler's, whatever
  /// the number of workers; the batch carries its samples' ids, the epoch and the seed.
  std::optional<Batch> next();
  std::int64_t batches_per_epoch() const;

 private:
  Batch make_batch(std::int64_t batch_index) const;
  void stop_workers();
  void work();

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<Sampler> sampler_;
  Options options_;
  std::vector<std::int64_t> indices_;  ///< this epoch's order (copied from the sampler)
  std::int64_t epoch_ = 0;

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
