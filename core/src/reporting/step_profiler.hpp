#pragma once
// Internal: trainer.profile_steps — the torch profiler (Kineto: CPU operators, and CUDA kernels
// on GPUs) around a few optimizer steps of a running job, written as a trace that Perfetto,
// chrome://tracing and TensorBoard's profile plugin open, with a table of where the time went.

#include <cstdint>
#include <filesystem>

#include <c10/core/Device.h>

namespace wanfw {

class StepProfiler {
 public:
  /// Profiles steps `first` to `first + count - 1` (1-based; `count` 0: never) of the process of
  /// rank `rank` on `device`, writing `folder`/trace-rank<R>.json; the main process logs the table.
  StepProfiler(std::int64_t first, std::int64_t count, c10::Device device, std::filesystem::path folder, int rank,
               bool main);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  /// Called before step `step` runs and after it ended (its optimizer update applied).
  void before_step(std::int64_t step);
  void after_step(std::int64_t step);
  /// The run ended: a window still open (it reached past the last step) is written as it is.
  void finish();

 private:
  void stop();

  std::int64_t first_, last_;
  c10::Device device_;
  std::filesystem::path folder_;
  int rank_;
  bool main_;
  std::int64_t ended_ = 0;  ///< the last step the open window recorded
  bool running_ = false;
};

}  // namespace wanfw
