#include "causal_student.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "flow_matching_model.hpp"
#include "wan/causal_sampler.hpp"
#include "wan/expert_sides.hpp"
#include "wan/flow_matching.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"
#include "wanfw/sample_random.hpp"

namespace wan_fm {

std::vector<wanfw::OptionSpec> causal_training_options() {
  using T = wanfw::OptionType;
  return {
      wanfw::option("causal.training", T::Choice)
          .value("teacher_forcing")
          .choices({"teacher_forcing", "ode_pairs"})
          .doc("How a causal student trains. teacher_forcing: each chunk of the data's latents noised at its own "
               "level, attending to the clean chunks before it. ode_pairs: the regression on a teacher's ODE pairs "
               "(a data set `wanfw sample --dataset` wrote with sample_trajectory_steps), each chunk at one of the "
               "teacher's states, the loss on the x0 estimate against the teacher's final sample (Self Forcing's "
               "causal initialisation)."),
      wanfw::option("sample_trajectory_steps", T::NumberList)
          .value("[]")
          .doc("A bidirectional teacher: steps on 0..1000, warped by sample_shift, at which `wanfw sample` records "
               "its sampler's states as `trajectory` beside the final latents: a causal student's ODE pairs (its "
               "causal.steps). sample_steps must pass through each: a multiple of their count (48 for 4)."),
  };
}

void causal_training_from(const wanfw::Options& o, FlowMatchingSettings& s) {
  s.ode_pairs = o.string("causal.training") == "ode_pairs";
  if (s.ode_pairs && !s.causal.enabled())
    o.fail("causal.training", "ode_pairs trains a causal student, and causal.frames_per_chunk is 0",
           "set causal.frames_per_chunk, or causal.training: teacher_forcing");
  s.trajectory_steps = o.numbers("sample_trajectory_steps");
  if (s.trajectory_steps.empty()) return;
  if (s.causal.enabled())
    o.fail("sample_trajectory_steps", "the teacher that records ODE pairs is a bidirectional model",
           "sample the pairs with the teacher's config (causal.frames_per_chunk: 0)");
  for (std::size_t i = 0; i < s.trajectory_steps.size(); ++i)
    if (!(s.trajectory_steps[i] > 0 && s.trajectory_steps[i] <= 1000) ||
        (i > 0 && s.trajectory_steps[i] >= s.trajectory_steps[i - 1]))
      o.fail("sample_trajectory_steps",
             fmt::format("must descend within (0, 1000]; got {} at position {}", s.trajectory_steps[i], i),
             "the student's causal.steps: [1000, 750, 500, 250]");
}

wanfw::TrainingLayout causal_training_layout(const wanfw::Options& o, const FlowMatchingSettings& s,
                                             wanfw::TrainingLayout layout) {
  if (!s.causal.enabled() || layout.latent.size() != 3) return layout;
  if (!s.causal.layout->cuts(layout.latent[0]))
    o.fail("causal.frames_per_chunk",
           fmt::format("the largest bucket's {} latent frames do not cut into {}", layout.latent[0],
                       s.causal.layout->describe()),
           "choose buckets whose latent frames cut into the chunks (1 + a multiple with "
           "independent_first_frame), or another frames_per_chunk");
  if (!s.ode_pairs) layout.latent[0] *= 2;
  return layout;
}

std::vector<wanfw::FieldSpec> ode_pair_fields(const FlowMatchingSettings& settings, std::int64_t channels) {
  const auto k = static_cast<std::int64_t>(settings.causal.steps.size());
  return {{"trajectory", {k, channels, wanfw::dim::frames, wanfw::dim::height, wanfw::dim::width}},
          {"trajectory_timesteps", {k}}};
}

namespace {

/// Per-frame levels or timesteps `per_frame` [B, F] with a ti2v image's frame 0 at 0 (clean).
torch::Tensor image_at_zero(const FlowMatchingSettings& settings, const torch::Tensor& x0,
                            const torch::Tensor& per_frame) {
  if (!wan::keeps_first_frame(settings.task, x0)) return per_frame;
  return torch::cat({torch::zeros_like(per_frame.narrow(1, 0, 1)), per_frame.narrow(1, 1, per_frame.size(1) - 1)}, 1);
}

}  // namespace

torch::Tensor draw_ode_steps(const wanfw::Batch& batch, const FlowMatchingSettings& settings, std::int64_t chunks) {
  const std::vector<double> levels = wan::warped_timesteps(settings.causal.steps, settings.sampler.shift);
  const auto k = static_cast<double>(levels.size());
  const torch::Tensor u = wanfw::sample_rand(batch, "ode_step", {chunks}).to(torch::kFloat64);
  if (settings.expert != wan::Expert::Both) return (u * k).floor().clamp_max(k - 1);
  // The levels at or above the boundary are the high-noise expert's (they lead: the levels descend).
  const auto high_levels = static_cast<double>(std::count_if(
      levels.begin(), levels.end(), [&](double t) { return wan::routes_high(t / 1000, settings.boundary); }));
  const torch::Tensor high =
      (settings.experts.high_share
           ? wan::high_noise_places(batch, *settings.experts.high_share).to(u.device())
           : wanfw::sample_rand(batch, "expert_side").to(u.device(), torch::kFloat64) < high_levels / k)
          .unsqueeze(1);
  const torch::Tensor on_high = (u * high_levels).floor().clamp_max(std::max(high_levels - 1, 0.0));
  const torch::Tensor on_low =
      high_levels + (u * (k - high_levels)).floor().clamp_max(std::max(k - high_levels - 1, 0.0));
  if (high_levels == 0) return on_low;
  if (high_levels == k) return on_high;
  return torch::where(high, on_high, on_low);
}

torch::Tensor causal_ode_error(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings,
                               const torch::Tensor& trajectory, const torch::Tensor& timesteps, const torch::Tensor& x0,
                               const torch::Tensor& chunk_step, const torch::Tensor& context) {
  const std::vector<double> levels = wan::warped_timesteps(settings.causal.steps, settings.sampler.shift);
  const torch::Tensor expected = torch::tensor(levels, torch::kFloat32).to(timesteps.device());
  if (timesteps.size(1) != std::ssize(levels) ||
      (timesteps.to(torch::kFloat32) - expected).abs().max().item<double>() > 0.5)
    throw wanfw::Error(
        fmt::format("the ODE pairs were recorded at t = {}, but the student's levels (causal.steps warped by "
                    "sample_shift {}) are {}",
                    c10::str(timesteps[0].to(torch::kCPU, torch::kFloat64)), settings.sampler.shift,
                    fmt::join(levels, ", ")),
        "record the pairs with sample_trajectory_steps equal to the student's causal.steps, at the same sample_shift");
  const std::int64_t frames = x0.size(2);
  causal_chunks(settings, frames, "training");
  const wan::CausalLayout& layout = *settings.causal.layout;
  const torch::Tensor step = layout.per_frame(chunk_step.to(torch::kLong));  // [B, F]
  const auto b = x0.size(0);
  const torch::Tensor index =
      step.view({b, 1, 1, frames, 1, 1}).expand({b, 1, x0.size(1), frames, x0.size(3), x0.size(4)});
  // Each frame at its chunk's state; a ti2v first frame is the image, clean at t = 0.
  const torch::Tensor x =
      wan::with_kept_first_frame(settings.task, x0, trajectory.gather(1, index).squeeze(1).to(x0.scalar_type()));
  const torch::Tensor t = image_at_zero(settings, x0, timesteps.to(torch::kFloat32).gather(1, step));  // [B, F]
  const wan::CausalPass pass{&layout, nullptr, 0};
  const torch::Tensor v = denoiser.forward(x, t, context, {}, std::get<0>(t.max(1)) / 1000.0, {}, &pass);
  const torch::Tensor level = (t / 1000.0).view({b, 1, frames, 1, 1});
  const torch::Tensor estimate = x.to(torch::kFloat32) - level * v.to(torch::kFloat32);
  return wan::predicted_mean(settings.task, (estimate - x0.to(torch::kFloat32)).pow(2));
}

std::int64_t causal_chunks(const FlowMatchingSettings& settings, std::int64_t frames, const char* what) {
  const wan::CausalLayout& layout = *settings.causal.layout;
  if (!layout.cuts(frames))
    throw wanfw::Error(
        fmt::format("{}: {} latent frames do not cut into {} (causal.frames_per_chunk{})", what, frames,
                    layout.describe(), layout.independent_first_frame ? ", causal.independent_first_frame" : ""),
        layout.independent_first_frame
            ? "choose buckets (or sample_size) of 1 + a multiple of the chunk latent frames"
            : "choose buckets (or sample_size) whose latent frames are a multiple of the chunk");
  return layout.chunks(frames);
}

torch::Tensor causal_error(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings, const torch::Tensor& x0,
                           const torch::Tensor& noise, const torch::Tensor& chunk_sigma, const torch::Tensor& context) {
  const std::int64_t frames = x0.size(2);
  causal_chunks(settings, frames, "training");
  // A ti2v first frame is the image: clean in both copies, and not predicted.
  const torch::Tensor s =
      image_at_zero(settings, x0, settings.causal.layout->per_frame(chunk_sigma.to(torch::kFloat32)));  // [B, F]
  const torch::Tensor level = s.view({s.size(0), 1, frames, 1, 1}).to(x0.scalar_type());
  const torch::Tensor noised = (1 - level) * x0 + level * noise;
  // The clean copy at t = 0 (as a rollout's context passes), the noisy one at its chunks' levels.
  const torch::Tensor t = torch::cat({torch::zeros_like(s), s * 1000}, 1);
  const wan::CausalPass pass{&*settings.causal.layout, nullptr, 0, true};
  const torch::Tensor prediction =
      denoiser.forward(torch::cat({x0, noised}, 2), t, context, {}, std::get<0>(chunk_sigma.max(1)), {}, &pass)
          .narrow(2, frames, frames);
  const torch::Tensor target = noise - x0;
  return wan::predicted_mean(settings.task, (prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).pow(2));
}

torch::Tensor causal_draw(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings,
                          const torch::Tensor& context, const torch::Tensor& image, at::IntArrayRef shape,
                          std::uint64_t seed, const torch::Device& device,
                          const std::function<void(const at::Tensor&)>& made) {
  const wan::CausalLayout& layout = *settings.causal.layout;
  wan::CausalSampling sampling;
  sampling.timesteps = wan::warped_timesteps(settings.causal.steps, settings.sampler.shift);
  sampling.context_timestep = settings.causal.context_timestep;
  sampling.chunks = causal_chunks(settings, shape[2], "sampling");
  if (settings.task == wan::Task::TI2V && shape[2] > 1)  // the image is the first chunk, made already
    sampling.initial = image.to(device, torch::kFloat32).view({shape[0], shape[1], 1, shape[3], shape[4]});
  wanfw::log::info(fmt::format("causal student: {} chunks ({}{}), {} steps each{}{}", sampling.chunks,
                               layout.describe(), sampling.initial.defined() ? "; the image is the first" : "",
                               sampling.timesteps.size(),
                               settings.expert == wan::Expert::Both
                                   ? fmt::format(", each by the expert of its level (boundary t = {:g}), every chunk "
                                                 "into both experts' caches",
                                                 settings.boundary * 1000)
                                   : "",
                               settings.sampler.guidance != 1.0
                                   ? fmt::format(", without guidance (sample_guidance {:g} applies to bidirectional "
                                                 "models)",
                                                 settings.sampler.guidance)
                                   : ""));
  const torch::Tensor text = context.to(device);
  const auto velocity = [&](const torch::Tensor& x, const torch::Tensor& t, const wan::CausalPass& pass) {
    return denoiser.forward(x, t, text, {}, std::get<0>(t.max(1)) / 1000.0, {}, &pass);
  };
  return wan::stream_sample(velocity, denoiser, layout, shape, sampling, seed, device, made);
}

}  // namespace wan_fm
