#include "wan/causal_sampler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/flow_matching.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wan {

std::vector<double> warped_timesteps(const std::vector<double>& steps, double shift) {
  std::vector<double> out;
  for (const double s : steps) out.push_back(1000.0 * shifted(s / 1000.0, shift));
  return out;
}

torch::Tensor chunk_noise(std::uint64_t seed, std::int64_t chunk, std::int64_t step, at::IntArrayRef shape) {
  auto generator =
      at::make_generator<at::CPUGeneratorImpl>(wanfw::sample_stream_seed(seed, chunk, step, "causal noise"));
  return torch::randn(shape, generator, torch::TensorOptions().dtype(torch::kFloat32));
}

torch::Tensor causal_sample(const CausalVelocity& velocity, KvCache& cache, at::IntArrayRef shape,
                            const CausalSampling& sampling, std::uint64_t seed, const torch::Device& device,
                            const std::function<void(std::int64_t, const torch::Tensor&)>& made) {
  if (shape.size() != 4)
    throw wanfw::Error(fmt::format("causal sampling makes latents of [B, C, H, W] frames, got {}", c10::str(shape)));
  if (sampling.timesteps.empty() || sampling.chunks < 1)
    throw wanfw::Error("causal sampling needs at least one timestep and one chunk");
  torch::NoGradGuard no_grad;
  cache.clear();
  const std::int64_t f = cache.layout().frames_per_chunk, batch = shape[0];
  const std::vector<std::int64_t> chunk_shape = {shape[0], shape[1], f, shape[2], shape[3]};
  const auto levels = [&](double t) { return torch::full({batch, f}, t, torch::TensorOptions().device(device)); };
  std::vector<torch::Tensor> chunks;
  for (std::int64_t k = 0; k < sampling.chunks; ++k) {
    const CausalPass pass{&cache.layout(), &cache, k * f};
    torch::Tensor x = chunk_noise(seed, k, 0, chunk_shape).to(device), estimate;
    for (std::size_t j = 0; j < sampling.timesteps.size(); ++j) {
      const double t = sampling.timesteps[j], s = t / 1000.0;
      estimate = x - s * velocity(x, levels(t), pass).to(torch::kFloat32);
      if (j + 1 == sampling.timesteps.size()) break;
      const double next = sampling.timesteps[j + 1] / 1000.0;
      const torch::Tensor fresh = chunk_noise(seed, k, static_cast<std::int64_t>(j) + 1, chunk_shape).to(device);
      x = (1 - next) * estimate + next * fresh;
    }
    // The clean chunk once more at the context timestep: its keys and values stay for the next.
    velocity(estimate, levels(sampling.context_timestep), pass);
    if (made) made(k, estimate);
    chunks.push_back(estimate);
  }
  return torch::cat(chunks, 2);
}

}  // namespace wan
