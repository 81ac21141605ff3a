#include "wan/expert_sides.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wan {

namespace {

/// u in [0, 1) -> s, the sampling's inverse distribution (as draw_sigma maps its draws).
torch::Tensor sigma_at(const torch::Tensor& u, const TimestepSampling& s) {
  torch::Tensor x;
  if (s.method == SigmaDistribution::LogitNormal)
    x = torch::sigmoid(torch::special_ndtri(u.clamp(1e-12, 1 - 1e-12)) * s.logit_std + s.logit_mean);
  else if (s.method == SigmaDistribution::Shift)
    x = shifted(u, s.shift);
  else
    x = u;
  return s.min_sigma + (s.max_sigma - s.min_sigma) * x;
}

/// The float32 values closest to `boundary` that route to each side (routes_high).
std::pair<float, float> side_limits(double boundary) {
  float high = static_cast<float>(boundary), low = static_cast<float>(boundary);
  while (!routes_high(static_cast<double>(high), boundary)) high = std::nextafter(high, 2.0f);
  while (routes_high(static_cast<double>(low), boundary)) low = std::nextafter(low, -1.0f);
  return {high, low};
}

}  // namespace

torch::Tensor high_noise_places(const wanfw::Batch& batch, double share) {
  if (batch.step_positions.size() != batch.sample_ids.size() || batch.step_samples <= 0)
    throw wanfw::Error("a fixed expert share needs each sample's place in its step, which this batch does not carry",
                       "high_noise.share applies to training batches");
  torch::Tensor out = torch::empty({static_cast<std::int64_t>(batch.step_positions.size())}, torch::kBool);
  bool* flag = out.data_ptr<bool>();
  for (std::size_t i = 0; i < batch.step_positions.size(); ++i) {
    const auto p = static_cast<double>(batch.step_positions[i]);
    flag[i] = std::floor((p + 1) * share + 0.5) - std::floor(p * share + 0.5) >= 1;
  }
  return out;
}

double probability_below(const TimestepSampling& s, double sigma) {
  const double x = std::clamp((sigma - s.min_sigma) / (s.max_sigma - s.min_sigma), 0.0, 1.0);
  if (s.method == SigmaDistribution::Shift) return unshifted(x, s.shift);
  if (s.method == SigmaDistribution::LogitNormal) {
    if (x <= 0 || x >= 1) return x;
    return 0.5 * std::erfc(-((std::log(x / (1 - x)) - s.logit_mean) / s.logit_std) / std::sqrt(2.0));
  }
  return x;
}

torch::Tensor draw_sigma_on_sides(const wanfw::Batch& batch, const TimestepSampling& s, double boundary,
                                  const torch::Tensor& high, std::int64_t levels) {
  if (s.method == SigmaDistribution::Fixed)
    throw wanfw::Error("fixed timesteps cannot be drawn on a side of the experts' boundary",
                       "draw the timesteps (uniform, logit_normal or shift) or unset high_noise.share");
  const double below = probability_below(s, boundary);
  const std::vector<std::int64_t> shape = levels > 0 ? std::vector<std::int64_t>{levels} : std::vector<std::int64_t>{};
  const torch::Tensor v = wanfw::sample_rand(batch, "timestep", shape).to(torch::kCPU, torch::kFloat64);
  const torch::Tensor on_high = levels > 0 ? high.to(torch::kCPU).unsqueeze(1) : high.to(torch::kCPU);
  const torch::Tensor u = torch::where(on_high, below + (1 - below) * v, below * v);
  const auto [high_least, low_most] = side_limits(boundary);
  torch::Tensor sigma = sigma_at(u, s).to(torch::kFloat32);
  sigma = torch::where(on_high, sigma.clamp_min(high_least), sigma.clamp_max(low_most));
  return sigma.to(batch.device());
}

}  // namespace wan
