#include "causal_student.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "flow_matching_model.hpp"
#include "wan/causal_sampler.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"

namespace wan_fm {

std::int64_t causal_chunks(const FlowMatchingSettings& settings, std::int64_t frames, const char* what) {
  const std::int64_t per_chunk = settings.causal.layout->frames_per_chunk;
  if (frames % per_chunk != 0)
    throw wanfw::Error(fmt::format("{}: {} latent frames do not divide into chunks of causal.frames_per_chunk {}",
                                   what, frames, per_chunk),
                       "choose buckets (or sample_size) whose latent frames are a multiple of the chunk");
  return frames / per_chunk;
}

torch::Tensor causal_error(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings, const torch::Tensor& x0,
                           const torch::Tensor& noise, const torch::Tensor& chunk_sigma,
                           const torch::Tensor& context) {
  const std::int64_t frames = x0.size(2), per_chunk = settings.causal.layout->frames_per_chunk;
  causal_chunks(settings, frames, "training");
  const torch::Tensor s = chunk_sigma.to(torch::kFloat32).repeat_interleave(per_chunk, 1);  // [B, F]
  const torch::Tensor level = s.view({s.size(0), 1, frames, 1, 1}).to(x0.scalar_type());
  const torch::Tensor noised = (1 - level) * x0 + level * noise;
  // The clean copy at t = 0 (as a rollout's context passes), the noisy one at its chunks' levels.
  const torch::Tensor t = torch::cat({torch::zeros_like(s), s * 1000}, 1);
  const wan::CausalPass pass{&*settings.causal.layout, nullptr, 0, true};
  const torch::Tensor prediction =
      denoiser.forward(torch::cat({x0, noised}, 2), t, context, {}, std::get<0>(chunk_sigma.max(1)), {}, &pass)
          .narrow(2, frames, frames);
  const torch::Tensor target = noise - x0;
  return (prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).pow(2).flatten(1).mean(1);
}

torch::Tensor causal_draw(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings,
                          const torch::Tensor& context, at::IntArrayRef shape, std::uint64_t seed,
                          const torch::Device& device) {
  const wan::CausalLayout& layout = *settings.causal.layout;
  wan::CausalSampling sampling;
  sampling.timesteps = wan::warped_timesteps(settings.causal.steps, settings.sampler.shift);
  sampling.context_timestep = settings.causal.context_timestep;
  sampling.chunks = causal_chunks(settings, shape[2], "sampling");
  const auto grid = denoiser.dits().front()->token_grid(layout.frames_per_chunk, shape[3], shape[4]);
  wan::KvCache cache(layout, denoiser.config().num_layers, grid[1] * grid[2]);
  wanfw::log::info(fmt::format("causal student: {} chunks of {} latent frames, {} steps each{}", sampling.chunks,
                               layout.frames_per_chunk, sampling.timesteps.size(),
                               settings.sampler.guidance != 1.0
                                   ? fmt::format(", without guidance (sample_guidance {:g} applies to bidirectional "
                                                 "models)",
                                                 settings.sampler.guidance)
                                   : ""));
  const torch::Tensor text = context.to(device);
  const auto velocity = [&](const torch::Tensor& x, const torch::Tensor& t, const wan::CausalPass& pass) {
    return denoiser.forward(x, t, text, {}, std::get<0>(t.max(1)) / 1000.0, {}, &pass);
  };
  return wan::causal_sample(velocity, cache, {shape[0], shape[1], shape[3], shape[4]}, sampling, seed, device);
}

}  // namespace wan_fm
