// A causal generator's self-rollout (causal_rollout.hpp): its refusals, the exit step, and the
// DmdModel's rollout and streaming sampler.
#include "dmd/causal_rollout.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include "dmd/dmd_model.hpp"
#include "wan/causal_sampler.hpp"
#include "wan/lora.hpp"
#include "wanfw/log.hpp"
#include "wanfw/sample_random.hpp"

namespace wan_distill {

void refuse_what_a_causal_generator_cannot_do(const wanfw::Options& o, const DistillSettings& s, wan::Expert expert) {
  const char* chunk = "causal.frames_per_chunk";
  if (s.objective != Objective::Dmd)
    o.fail(chunk, "a causal generator trains by objective dmd on its own rollout (Self Forcing)",
           "set objective: dmd, or causal.frames_per_chunk: 0");
  if (s.task != wan::Task::T2V)
    o.fail(chunk,
           fmt::format("a causal generator makes text to video; {} is not supported yet", wan::task_name(s.task)),
           "set task: t2v (with causal.independent_first_frame, its export streams ti2v from an image), or "
           "causal.frames_per_chunk: 0");
  if (s.inputs != Inputs::Generator)
    o.fail("inputs",
           fmt::format("a causal generator trains on its own rollout, not on inputs: {}", inputs_name(s.inputs)),
           "set inputs: generator (prompts only), or causal.frames_per_chunk: 0");
  if (o.number("regression_weight") > 0)
    o.fail("regression_weight", "a causal generator's rollout has no one input point to regress at",
           "set regression_weight: 0 with causal.frames_per_chunk");
  const wan::CausalLayout& layout = *s.causal.layout;
  for (const auto& [name, size] : {std::pair{"latent_size", s.latent_size}, {"sample_size", s.sampler.size}})
    if (size && !layout.cuts(size->frames))
      o.fail(name, fmt::format("its {} latent frames do not cut into {}", size->frames, layout.describe()),
             fmt::format("choose {}a multiple of {} latent frames", layout.independent_first_frame ? "1 + " : "",
                         layout.frames_per_chunk));
}

std::size_t exit_step(const wanfw::Batch& batch, std::size_t steps, std::string_view stream) {
  const auto drawn = static_cast<std::size_t>(std::floor(wanfw::step_rand(batch, stream) * static_cast<double>(steps)));
  return std::min(drawn, steps - 1);
}

wan::CausalSampling DmdModel::causal_sampling(std::int64_t frames) const {
  const wan::CausalLayout& layout = *common_.causal.layout;
  if (!layout.cuts(frames))
    throw wanfw::Error(fmt::format("{} latent frames do not cut into {}", frames, layout.describe()),
                       "choose latent frames (latent_size, sample_size) that cut into the chunks");
  wan::CausalSampling sampling;
  sampling.timesteps.clear();
  for (const double level : dmd_.levels()) sampling.timesteps.push_back(1000.0 * level);
  sampling.context_timestep = common_.causal.context_timestep;
  sampling.chunks = layout.chunks(frames);
  return sampling;
}

wan::CausalVelocity DmdModel::causal_velocity(const torch::Tensor& context) {
  return [this, context](const torch::Tensor& x, const torch::Tensor& t, const wan::CausalPass& pass) {
    const wan::AdapterScope generator_only(generator_.dits(), {true, false});
    return generator_.forward(x, t, context, {}, std::get<0>(t.max(1)) / 1000.0, {}, &pass).to(torch::kFloat32);
  };
}

torch::Tensor DmdModel::rollout(const wanfw::Batch& batch, const Conditions& c, const torch::Tensor& noise,
                                std::size_t exit) {
  const wan::CausalLayout& layout = *common_.causal.layout;
  const wan::CausalSampling sampling = causal_sampling(noise.size(2));
  wan::KvCache cache = wan::rollout_cache(generator_, layout, noise.size(3), noise.size(4));
  const auto chunk_noise = [&](std::int64_t chunk, std::int64_t step) {
    const std::int64_t f = layout.chunk_frames(chunk);
    if (step == 0) return noise.narrow(2, layout.chunk_first(chunk), f);  // the chunk's slice of the sample's noise
    return wanfw::sample_randn(batch, fmt::format("rollout_noise/{}/{}", chunk, step),
                               {noise.size(1), f, noise.size(3), noise.size(4)}, torch::kFloat32);
  };
  return wan::causal_rollout(causal_velocity(c.context), cache, chunk_noise, sampling, exit);
}

std::map<std::string, at::Tensor> DmdModel::causal_samples(const wan::SampleInputs& given, std::uint64_t seed,
                                                           const std::function<void(const at::Tensor&)>& made) {
  const wan::CausalLayout& layout = *common_.causal.layout;
  const auto shape = given.noise.sizes();
  const wan::CausalSampling sampling = causal_sampling(shape[2]);
  wanfw::log::info(fmt::format("causal generator: {} chunks ({}), {} steps each", sampling.chunks, layout.describe(),
                               sampling.timesteps.size()));
  const torch::Tensor video =
      wan::stream_sample(causal_velocity(given.context), generator_, layout, shape, sampling, seed, device(), made);
  return {{"latents", video.cpu()}};
}

}  // namespace wan_distill
