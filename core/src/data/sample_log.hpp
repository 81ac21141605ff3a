#pragma once
// Internal: data.sample_log — every micro-batch's sample ids, by rank, in
// <run>/samples/rank_<R>.csv (step, micro_batch, epoch, bucket, sample_ids). A resumed run appends:
// the steps after its checkpoint appear again, as trained the second time.

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "wanfw/data.hpp"

namespace wanfw {

class SampleLog {
 public:
  /// Opens (or continues) the rank's file; throws FileError when it cannot be written.
  SampleLog(const std::filesystem::path& run_dir, int rank);
  void record(std::int64_t step, int micro_batch, std::int64_t epoch, const Bucket& bucket, const Batch& batch);
  /// Before a checkpoint and at the end: what the log says is on disk.
  void flush();

 private:
  std::ofstream out_;
};

}  // namespace wanfw
