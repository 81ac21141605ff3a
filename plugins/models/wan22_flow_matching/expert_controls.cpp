#include "expert_controls.hpp"

#include <cmath>

#include <fmt/format.h>

#include "wan/expert_sides.hpp"
#include "wan/lora.hpp"
#include "wanfw/sample_random.hpp"

namespace wan_fm {

namespace {

using T = wanfw::OptionType;

const auto& kExperts = wan::kExpertNames;

/// The expert's range: its side of the boundary within the run's range, narrowed by what is set.
ExpertControl control_from(const wanfw::Options& o, const std::string& name, double lo, double hi) {
  ExpertControl c;
  c.lr_scale = o.number(name + ".lr_scale");
  if (!(c.lr_scale >= 0) || !std::isfinite(c.lr_scale))
    o.fail(name + ".lr_scale", "must be finite and at least 0 (0 freezes the expert)");
  c.min_sigma = o.has(name + ".min_timestep") ? o.number(name + ".min_timestep") / 1000.0 : lo;
  c.max_sigma = o.has(name + ".max_timestep") ? o.number(name + ".max_timestep") / 1000.0 : hi;
  if (!(c.min_sigma >= lo - 1e-12 && c.max_sigma <= hi + 1e-12 && c.min_sigma < c.max_sigma))
    o.fail(o.has(name + ".min_timestep") ? name + ".min_timestep" : name + ".max_timestep",
           fmt::format("the {} expert's range [{:g}, {:g}] must be a non-empty part of its side of the boundary "
                       "within min_timestep / max_timestep: [{:g}, {:g}]",
                       name == "high_noise" ? "high-noise" : "low-noise", c.min_sigma * 1000, c.max_sigma * 1000,
                       lo * 1000, hi * 1000));
  return c;
}

}  // namespace

std::vector<wanfw::OptionSpec> expert_control_options() {
  std::vector<wanfw::OptionSpec> out;
  for (const std::string expert : kExperts) {
    const std::string side = expert == "high_noise" ? "at or above" : "below";
    out.push_back(wanfw::option(expert + ".lr_scale", T::Number)
                      .value("1.0")
                      .doc(fmt::format("expert: both: the {} expert's learning rate as a multiple of the scheduled "
                                       "one (times lora.lr_scale under LoRA); logged as lr/{}.",
                                       expert == "high_noise" ? "high-noise" : "low-noise", expert)));
    out.push_back(wanfw::option(expert + ".min_timestep", T::Number)
                      .doc(fmt::format("expert: both: the lowest timestep the expert trains on (its side: {} the "
                                       "boundary); its samples keep their share, spread over its range.",
                                       side)));
    out.push_back(wanfw::option(expert + ".max_timestep", T::Number)
                      .doc("expert: both: the highest timestep the expert trains on."));
  }
  out.push_back(wanfw::option("high_noise.share", T::Number)
                    .doc("expert: both: the high-noise expert's share of every step's samples (0..1): round(share x "
                         "step batch) of them, spread over the step, draw their timestep on its side of the boundary "
                         "and the rest on the low-noise side, each from the sampling's distribution on that side. "
                         "Unset: each sample's own draw picks its side (the distribution's share). docs/wan.md says "
                         "what it changes in the objective."));
  return out;
}

ExpertControls expert_controls_from(const wanfw::Options& o, wan::Expert expert, double boundary,
                                    const wan::TimestepSampling& sampling) {
  ExpertControls c;
  if (expert != wan::Expert::Both) {
    if (o.has("high_noise.share"))
      o.fail("high_noise.share", "per-expert settings need both experts in the run",
             "set model.expert: both, or unset high_noise.share");
    for (const std::string name : kExperts)
      for (const char* key : {".lr_scale", ".min_timestep", ".max_timestep"})
        if (o.has(name + key) && !(std::string(key) == ".lr_scale" && o.number(name + key) == 1.0))
          o.fail(name + key, "per-expert settings need both experts in the run",
                 "set model.expert: both, or use lr / min_timestep / max_timestep for the one expert");
    return c;
  }
  c.boundary = boundary;
  c.side_min = sampling.min_sigma;
  c.side_max = sampling.max_sigma;
  c.high = control_from(o, "high_noise", std::max(boundary, sampling.min_sigma), sampling.max_sigma);
  c.low = control_from(o, "low_noise", sampling.min_sigma, std::min(boundary, sampling.max_sigma));
  for (const std::string name : kExperts)
    c.ranged = c.ranged || o.has(name + ".min_timestep") || o.has(name + ".max_timestep");
  if (c.ranged && sampling.method == wan::SigmaDistribution::Fixed)
    o.fail("timestep_sampling", "fixed timesteps leave nothing to spread over the experts' ranges",
           "unset high_noise / low_noise .min_timestep and .max_timestep, or draw the timesteps");
  if (o.has("high_noise.share")) {
    const double share = o.number("high_noise.share");
    if (!(share >= 0 && share <= 1)) o.fail("high_noise.share", "must be between 0 and 1");
    if (sampling.method == wan::SigmaDistribution::Fixed)
      o.fail("high_noise.share", "fixed timesteps cannot be drawn on a chosen side of the boundary",
             "draw the timesteps (uniform, logit_normal or shift), or unset high_noise.share");
    if (!(boundary > sampling.min_sigma && boundary < sampling.max_sigma))
      o.fail("high_noise.share", fmt::format("the boundary t = {:g} must lie inside the timesteps drawn, [{:g}, {:g}]",
                                             boundary * 1000, sampling.min_sigma * 1000, sampling.max_sigma * 1000));
    c.high_share = share;
  }
  return c;
}

torch::Tensor draw_expert_sigma(const wanfw::Batch& batch, const wan::TimestepSampling& sampling,
                                const ExpertControls& c) {
  if (!c.high_share) return into_expert_ranges(wan::draw_sigma(batch, sampling), c);
  const torch::Tensor high = wan::high_noise_places(batch, *c.high_share);
  return into_expert_ranges(wan::draw_sigma_on_sides(batch, sampling, c.boundary, high), c);
}

torch::Tensor draw_expert_chunk_sigma(const wanfw::Batch& batch, const wan::TimestepSampling& sampling,
                                      const ExpertControls& c, std::int64_t chunks) {
  const torch::Tensor high = c.high_share ? wan::high_noise_places(batch, *c.high_share)
                                          : wanfw::sample_rand(batch, "expert_side").to(torch::kCPU, torch::kFloat64) >=
                                                wan::probability_below(sampling, c.boundary);
  return into_expert_ranges(wan::draw_sigma_on_sides(batch, sampling, c.boundary, high, chunks), c);
}

torch::Tensor into_expert_ranges(const torch::Tensor& sigma, const ExpertControls& c) {
  if (!c.ranged) return sigma;
  const torch::Tensor s = sigma.to(torch::kFloat64);
  const double high_from = std::max(c.boundary, c.side_min), low_to = std::min(c.boundary, c.side_max);
  // Each side's place (0 at its lower end, 1 at its upper) carried into the expert's range.
  const torch::Tensor high = c.high.min_sigma + (c.high.max_sigma - c.high.min_sigma) *
                                                    ((s - high_from) / std::max(c.side_max - high_from, 1e-12));
  const torch::Tensor low =
      c.low.min_sigma + (c.low.max_sigma - c.low.min_sigma) * ((s - c.side_min) / std::max(low_to - c.side_min, 1e-12));
  return torch::where(wan::routes_high(s, c.boundary), high, low).to(sigma.scalar_type());
}

std::vector<wanfw::ParameterGroup> expert_groups(const wan::WanDenoiser& denoiser, const wan::LoraSettings& lora,
                                                 const ExpertControls& controls) {
  std::vector<wanfw::ParameterGroup> groups;
  const auto dits = denoiser.dits();
  for (std::size_t i = 0; i < dits.size(); ++i) {
    wanfw::ParameterGroup group;
    group.name = denoiser.expert_name(i);
    const ExpertControl& c = group.name == "high_noise" ? controls.high : controls.low;
    const std::string prefix = group.name + "_model.";
    if (lora.enabled()) {
      for (auto& [name, tensor] : wan::adapter_parameters(*dits[i]))
        group.parameters.emplace_back(prefix + name, tensor);
      group.lr_scale = lora.lr_scale * c.lr_scale;
      group.weight_decay = lora.weight_decay;
    } else {
      for (const auto& item : dits[i]->named_parameters(/*recurse=*/true))
        if (item.value().requires_grad()) group.parameters.emplace_back(prefix + item.key(), item.value());
      group.lr_scale = c.lr_scale;
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace wan_fm
