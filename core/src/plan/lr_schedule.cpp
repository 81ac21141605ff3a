#include "plan/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace wanfw {

LearningRateSchedule::LearningRateSchedule(double peak, std::int64_t warmup_steps, std::int64_t total_steps,
                                           bool cosine, double min_ratio)
    : peak_(peak), warmup_(warmup_steps), total_(total_steps), cosine_(cosine), min_ratio_(min_ratio) {}

double LearningRateSchedule::at(std::int64_t step) const {
  if (step < warmup_) return peak_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (!cosine_) return peak_;
  const std::int64_t span = std::max<std::int64_t>(1, total_ - warmup_);
  const double progress = std::clamp(static_cast<double>(step - warmup_) / static_cast<double>(span), 0.0, 1.0);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return peak_ * (min_ratio_ + (1.0 - min_ratio_) * cosine);
}

}  // namespace wanfw
