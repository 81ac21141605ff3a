#include "reporting/step_profiler.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

namespace wanfw {

namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

constexpr std::size_t kTableRows = 12;

/// Device kernels (or, on a CPU, operators) by total time, largest first. CPU operators nest, so
/// their times are inclusive; kernels do not.
void log_table(const profiler::ProfilerResult& result, bool kernels, std::int64_t steps) {
  std::map<std::string, std::pair<std::uint64_t, std::int64_t>> by_name;  // ns, calls
  std::uint64_t total = 0;
  for (const auto& event : result.events()) {
    const bool on_device = event.deviceType() != c10::DeviceType::CPU;
    if (on_device != kernels || event.durationNs() == 0) continue;
    auto& entry = by_name[event.name()];
    entry.first += event.durationNs();
    entry.second += 1;
    if (on_device) total += event.durationNs();
  }
  std::vector<std::pair<std::string, std::pair<std::uint64_t, std::int64_t>>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  spdlog::info("profile: {} a step, over {} step(s){}", kernels ? "device kernels" : "CPU operators (inclusive)", steps,
               kernels ? fmt::format(", {:.2f} ms of kernels a step", total / 1e6 / steps) : "");
  for (std::size_t i = 0; i < std::min(rows.size(), kTableRows); ++i) {
    const auto& [name, entry] = rows[i];
    std::string shown = name;
    if (shown.size() > 90) shown.replace(87, std::string::npos, "...");
    const std::string share = kernels ? fmt::format("{:5.1f}%", total > 0 ? 100.0 * entry.first / total : 0.0) : "";
    spdlog::info("  {:9.3f} ms {:>6} {:6} calls  {}", entry.first / 1e6 / steps, share, entry.second / steps, shown);
  }
}

}  // namespace

StepProfiler::StepProfiler(std::int64_t first, std::int64_t count, c10::Device device, std::filesystem::path folder,
                           int rank, bool main)
    : first_(first), last_(first + count - 1), device_(device), folder_(std::move(folder)), rank_(rank), main_(main) {
  if (count <= 0) last_ = first_ - 1;
}

StepProfiler::~StepProfiler() {
  if (running_) profiler::disableProfiler();  // an error left the window open: nothing to report
}

void StepProfiler::before_step(std::int64_t step) {
  if (step != first_ || first_ > last_) return;
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device_.is_cuda()) {
    activities.insert(ActivityType::CUDA);
    torch::cuda::synchronize();  // earlier steps' kernels stay out of the window
  }
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  running_ = true;
}

void StepProfiler::after_step(std::int64_t step) {
  if (!running_) return;
  ended_ = step;
  if (step == last_) stop();
}

void StepProfiler::finish() {
  if (running_) stop();
}

void StepProfiler::stop() {
  if (device_.is_cuda()) torch::cuda::synchronize();  // every kernel of the window recorded
  running_ = false;
  const std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  std::filesystem::create_directories(folder_);
  const std::filesystem::path trace = folder_ / fmt::format("trace-rank{}.json", rank_);
  result->save(trace.string());
  const std::int64_t steps = ended_ - first_ + 1;
  if (!main_ || steps < 1) return;
  spdlog::info("profile of steps {}-{}: {} (open it in Perfetto or chrome://tracing)", first_, ended_, trace.string());
  log_table(*result, device_.is_cuda(), steps);
}

}  // namespace wanfw
