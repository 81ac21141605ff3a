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

torch::Tensor causal_rollout(const CausalVelocity& velocity, KvCache& cache, const ChunkNoise& noise,
                             const CausalSampling& sampling, std::size_t exit_step,
                             const std::function<void(std::int64_t, const torch::Tensor&)>& made) {
  if (sampling.timesteps.empty() || sampling.chunks < 1)
    throw wanfw::Error("causal sampling needs at least one timestep and one chunk");
  if (exit_step >= sampling.timesteps.size())
    throw wanfw::Error(
        fmt::format("a rollout's exit step {} is past its {} steps", exit_step, sampling.timesteps.size()));
  cache.clear();
  const CausalLayout& layout = cache.layout();
  const std::int64_t given = sampling.initial.defined() ? layout.chunks(sampling.initial.size(2)) : 0;
  if (sampling.initial.defined() && (given == 0 || given > sampling.chunks))
    throw wanfw::Error(fmt::format("causal sampling: {} given latent frames are not whole chunks of the {} made ({})",
                                   sampling.initial.size(2), sampling.chunks, layout.describe()),
                       "give the first frame alone with causal.independent_first_frame, or whole chunks");
  std::vector<torch::Tensor> chunks;
  for (std::int64_t k = 0; k < sampling.chunks; ++k) {
    const std::int64_t f = layout.chunk_frames(k);
    const CausalPass pass{&layout, &cache, layout.chunk_first(k)};
    const auto levels = [&](const torch::Tensor& x, double t) { return torch::full({x.size(0), f}, t, x.options()); };
    const auto context_pass = [&](const torch::Tensor& clean) {
      // The clean chunk once more at the context timestep: its keys and values stay for the next.
      torch::NoGradGuard no_grad;
      CausalPass into_cache = pass;
      into_cache.context = true;
      velocity(clean, levels(clean, sampling.context_timestep), into_cache);
    };
    if (k < given) {  // a given chunk: into the cache, and out as it is
      const torch::Tensor clean = sampling.initial.narrow(2, layout.chunk_first(k), f).to(torch::kFloat32);
      context_pass(clean);
      if (made) made(k, clean);
      chunks.push_back(clean);
      continue;
    }
    torch::Tensor x = noise(k, 0).to(torch::kFloat32);
    const auto estimate_at = [&](std::size_t j) {
      const double t = sampling.timesteps[j];
      return x - (t / 1000.0) * velocity(x, levels(x, t), pass).to(torch::kFloat32);
    };
    for (std::size_t j = 0; j < exit_step; ++j) {  // the steps before the exit, without autograd
      torch::NoGradGuard no_grad;
      const double next = sampling.timesteps[j + 1] / 1000.0;
      x = (1 - next) * estimate_at(j) + next * noise(k, static_cast<std::int64_t>(j) + 1).to(torch::kFloat32);
    }
    const torch::Tensor estimate = estimate_at(exit_step);
    context_pass(estimate.detach());
    if (made) made(k, estimate);
    chunks.push_back(estimate);
  }
  return torch::cat(chunks, 2);
}

torch::Tensor causal_sample(const CausalVelocity& velocity, KvCache& cache, at::IntArrayRef shape,
                            const CausalSampling& sampling, std::uint64_t seed, const torch::Device& device,
                            const std::function<void(std::int64_t, const torch::Tensor&)>& made) {
  if (shape.size() != 4)
    throw wanfw::Error(fmt::format("causal sampling makes latents of [B, C, H, W] frames, got {}", c10::str(shape)));
  torch::NoGradGuard no_grad;
  const auto noise = [&](std::int64_t chunk, std::int64_t step) {
    const std::vector<std::int64_t> chunk_shape = {shape[0], shape[1], cache.layout().chunk_frames(chunk), shape[2],
                                                   shape[3]};
    return chunk_noise(seed, chunk, step, chunk_shape).to(device);
  };
  const std::size_t last = sampling.timesteps.empty() ? 0 : sampling.timesteps.size() - 1;
  return causal_rollout(velocity, cache, noise, sampling, last, made);
}

KvCache rollout_cache(const WanDenoiser& denoiser, const CausalLayout& layout, std::int64_t height,
                      std::int64_t width) {
  const auto grid = denoiser.dits().front()->token_grid(layout.frames_per_chunk, height, width);
  // An expert pair's blocks one after the other: each expert's keys and values its own.
  const auto dits = static_cast<std::int64_t>(denoiser.dits().size());
  return KvCache(layout, denoiser.config().num_layers * dits, grid[1] * grid[2]);
}

torch::Tensor stream_sample(const CausalVelocity& velocity, const WanDenoiser& denoiser, const CausalLayout& layout,
                            at::IntArrayRef shape, const CausalSampling& sampling, std::uint64_t seed,
                            const torch::Device& device, const std::function<void(const at::Tensor&)>& made) {
  KvCache cache = rollout_cache(denoiser, layout, shape[3], shape[4]);
  const auto hand_over = [&](std::int64_t, const torch::Tensor& chunk) {
    if (made) made(chunk.cpu());
  };
  return causal_sample(velocity, cache, {shape[0], shape[1], shape[3], shape[4]}, sampling, seed, device, hand_over);
}

}  // namespace wan
