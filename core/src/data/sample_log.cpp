#include "data/sample_log.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace wanfw {

SampleLog::SampleLog(const fs::path& run_dir, int rank) {
  std::error_code ec;
  fs::create_directories(run_dir / "samples", ec);
  const fs::path file = run_dir / "samples" / fmt::format("rank_{}.csv", rank);
  const bool fresh = !fs::exists(file, ec);
  out_.open(file, std::ios::app);
  if (!out_) throw FileError(fmt::format("cannot write the sample log {}", file.string()), "check the run folder");
  if (fresh) out_ << "step,micro_batch,epoch,bucket,sample_ids\n";
}

void SampleLog::record(std::int64_t step, int micro_batch, std::int64_t epoch, const Bucket& bucket,
                       const Batch& batch) {
  out_ << fmt::format("{},{},{},{},{}\n", step, micro_batch, epoch, bucket.name(), fmt::join(batch.sample_ids, " "));
}

void SampleLog::flush() { out_.flush(); }

}  // namespace wanfw
