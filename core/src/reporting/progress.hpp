#pragma once
// Internal: the main process's view of a run in progress — a bar on a terminal, plain lines
// otherwise.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace wanfw {

class ProgressReporter {
 public:
  enum class Mode { Bar, Lines, Off };
  /// "auto" picks Bar when stdout is a terminal, Lines otherwise.
  static Mode mode_from(const std::string& setting);

  ProgressReporter(Mode mode, std::int64_t first_step, std::int64_t total_steps);
  /// Called after every optimizer step; `logged` holds what a logging step reported (the loss
  /// window's mean, lr, ...) and is empty on other steps. Lines are printed at logging steps; the
  /// bar shows the latest logged values.
  void update(std::int64_t step, const std::map<std::string, double>& logged);
  /// Ends the bar line so that later output starts on a fresh line.
  void finish();
  double steps_per_second() const;

 private:
  std::string status(std::int64_t step) const;

  Mode mode_;
  std::int64_t first_step_;
  std::int64_t total_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::int64_t last_step_ = 0;
  std::map<std::string, double> logged_;  ///< the latest logging step's values
  bool drawn_ = false;
};

/// "1h02m03s", "4m05s", "12s".
std::string format_duration(double seconds);

}  // namespace wanfw
