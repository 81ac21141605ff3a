// The official Euler sampler of a Wan model (wan/flow_matching.hpp's euler_sample), its renoise
// variant for few-step students, and the states it records for a causal student's ODE pairs.
#include <algorithm>
#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/flow_matching.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wan {

namespace {

/// The step of `sigmas` at each of `levels`, in order; throws naming sample_steps for a level the
/// schedule passes by.
std::vector<std::int64_t> recorded_steps(const std::vector<double>& sigmas, const std::vector<double>& levels,
                                         std::int64_t steps, double shift) {
  std::vector<std::int64_t> out;
  for (const double level : levels) {
    const auto at =
        std::find_if(sigmas.begin(), sigmas.end() - 1, [&](double s) { return std::abs(s - level) < 1e-9; });
    if (at == sigmas.end() - 1)
      throw wanfw::Error(
          fmt::format("sample_steps {} at sample_shift {} passes no step at t = {:.4g}, a level the trajectory records",
                      steps, shift, 1000.0 * level),
          fmt::format("record steps evenly spaced before the shift (1000, 750, 500, 250) and sample in a multiple of "
                      "their count (48 for 4), at the shift that warps them"));
    out.push_back(at - sigmas.begin());
  }
  return out;
}

}  // namespace

std::map<std::string, at::Tensor> euler_sample(const Velocity& velocity, const SampleInputs& given,
                                               const WanConfig& config, Task task, std::int64_t steps, double shift,
                                               double guidance, const std::string& solver, std::uint64_t seed,
                                               const std::vector<double>& record) {
  const bool renoise = solver == "renoise";
  const std::vector<double> sigmas = sampling_schedule(steps, shift);
  const std::vector<std::int64_t> recorded = recorded_steps(sigmas, record, steps, shift);
  const std::int64_t batch = given.noise.size(0);
  torch::Tensor x = given.noise;
  std::vector<torch::Tensor> states;
  for (std::int64_t i = 0; i < steps; ++i) {
    if (given.image.defined()) x = with_kept_first_frame(task, given.image.unsqueeze(2), x);
    if (std::find(recorded.begin(), recorded.end(), i) != recorded.end()) states.push_back(x.cpu());
    const torch::Tensor sigma = torch::full({batch}, sigmas[static_cast<std::size_t>(i)], x.options());
    const torch::Tensor t = task_timesteps(sigma, x, config, task);
    torch::Tensor v = velocity(x, t, given.context, sigma).to(torch::kFloat32);
    if (guidance != 1.0) {
      const torch::Tensor unconditional = velocity(x, t, given.negative, sigma).to(torch::kFloat32);
      v = guided_velocity(v, unconditional, guidance);
    }
    const double from = sigmas[static_cast<std::size_t>(i)], to = sigmas[static_cast<std::size_t>(i) + 1];
    if (!renoise) {
      x = x + (to - from) * v;  // dx/ds = v
    } else {
      const torch::Tensor x0 = x - from * v;
      x = i + 1 < steps ? (1 - to) * x0 + to * renoise_noise(seed, i, x.sizes()).to(x.device()) : x0;
    }
  }
  if (given.image.defined()) x = with_kept_first_frame(task, given.image.unsqueeze(2), x);
  if (given.reference_frames > 0)  // VACE: the reference frames were denoised with the video, and leave it here
    x = x.narrow(2, given.reference_frames, x.size(2) - given.reference_frames);
  std::map<std::string, at::Tensor> out = {{"latents", x.cpu()}, {"sigmas", torch::tensor(sigmas, torch::kFloat64)}};
  if (!record.empty()) {
    out["trajectory"] = torch::stack(states, 1);
    std::vector<double> timesteps;
    for (const double level : record) timesteps.push_back(1000.0 * level);
    out["trajectory_timesteps"] = torch::tensor(timesteps, torch::kFloat32).expand({batch, std::ssize(record)}).clone();
  }
  return out;
}

torch::Tensor guided_velocity(const torch::Tensor& conditional, const torch::Tensor& unconditional, double scale) {
  return unconditional + scale * (conditional - unconditional);
}

torch::Tensor renoise_noise(std::uint64_t seed, std::int64_t step, at::IntArrayRef shape) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(wanfw::sample_stream_seed(seed, 0, step, "renoise"));
  return torch::randn(shape, generator, torch::TensorOptions().dtype(torch::kFloat32));
}

}  // namespace wan
