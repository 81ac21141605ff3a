#include "reporting/progress.hpp"

#include <cmath>
#include <cstdio>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace wanfw {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<std::int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m{:02d}s", s / 3600, (s / 60) % 60, s % 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

ProgressReporter::Mode ProgressReporter::mode_from(const std::string& setting) {
  if (setting == "bar") return Mode::Bar;
  if (setting == "lines") return Mode::Lines;
  if (setting == "off") return Mode::Off;
  return ::isatty(STDOUT_FILENO) ? Mode::Bar : Mode::Lines;
}

ProgressReporter::ProgressReporter(Mode mode, std::int64_t first_step, std::int64_t total_steps)
    : mode_(mode),
      first_step_(first_step),
      total_(total_steps),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_),
      last_step_(first_step) {}

double ProgressReporter::steps_per_second() const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return elapsed > 0 ? static_cast<double>(last_step_ - first_step_) / elapsed : 0.0;
}

std::string ProgressReporter::status(std::int64_t step) const {
  const double rate = steps_per_second();
  const double eta = rate > 0 ? static_cast<double>(total_ - step) / rate : NAN;
  std::string text = fmt::format("step {}/{}", step, total_);
  if (auto it = logged_.find("loss"); it != logged_.end()) text += fmt::format(" loss {:.4g}", it->second);
  if (auto it = logged_.find("lr"); it != logged_.end()) text += fmt::format(" lr {:.3g}", it->second);
  text += fmt::format(" | {:.2f} it/s | eta {}", rate, format_duration(eta));
  return text;
}

void ProgressReporter::update(std::int64_t step, const std::map<std::string, double>& logged) {
  last_step_ = step;
  if (!logged.empty()) logged_ = logged;
  if (mode_ == Mode::Off) return;
  if (mode_ == Mode::Lines) {
    if (!logged.empty()) spdlog::info("{}", status(step));
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 24;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * step / total_) : kWidth;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(kWidth - filled), '.');
  std::fprintf(stdout, "\r\033[K[%s] %s", bar.c_str(), status(step).c_str());
  std::fflush(stdout);
  drawn_ = true;
}

void ProgressReporter::finish() {
  if (mode_ == Mode::Bar && drawn_) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
}

}  // namespace wanfw
