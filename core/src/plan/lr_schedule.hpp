#pragma once
// Internal: the learning rate at each optimizer step.

#include <cstdint>
#include <string>

namespace wanfw {

/// Linear warm-up from 0 to `peak` over `warmup_steps`, then constant or cosine decay to
/// `min_ratio * peak` at `total_steps`.
class LearningRateSchedule {
 public:
  LearningRateSchedule(double peak, std::int64_t warmup_steps, std::int64_t total_steps, bool cosine,
                       double min_ratio);
  /// The rate used for optimizer step `step` (0-based).
  double at(std::int64_t step) const;

 private:
  double peak_;
  std::int64_t warmup_;
  std::int64_t total_;
  bool cosine_;
  double min_ratio_;
};

}  // namespace wanfw
