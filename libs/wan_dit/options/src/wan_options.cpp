#include "wan/wan_options.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wan/attention_backend.hpp"
#include "wanfw/error.hpp"

namespace wan {

using T = wanfw::OptionType;

std::vector<wanfw::OptionSpec> dimension_options(const std::string& prefix, const std::string& default_preset,
                                                 const std::string& inherit) {
  std::vector<std::string> presets = wan_preset_names();
  const std::string keeps = inherit.empty() ? "the preset's" : fmt::format("the preset's (or {}'s)", inherit);
  auto preset = wanfw::option(prefix + "preset", inherit.empty() ? T::Choice : T::String)
                    .value(default_preset.empty() ? "\"\"" : default_preset)
                    .doc(inherit.empty() ? "Model dimensions from the public configs."
                                         : fmt::format("Model dimensions from the public configs ({}); empty: {}'s.",
                                                       fmt::join(presets, ", "), inherit));
  if (inherit.empty()) preset.choices(presets);
  return {
      preset,
      wanfw::option(prefix + "dim", T::Integer).value("0").doc(fmt::format("Hidden size; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "ffn_dim", T::Integer).value("0").doc(fmt::format("Feed-forward size; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "num_heads", T::Integer).value("0").doc(fmt::format("Attention heads; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "num_layers", T::Integer).value("0").doc(fmt::format("Blocks; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "in_dim", T::Integer).value("0").doc(fmt::format("Input latent channels; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "out_dim", T::Integer)
          .value("0")
          .doc(fmt::format("Output latent channels; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "text_dim", T::Integer).value("0").doc(fmt::format("Text-encoder width; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "text_len", T::Integer)
          .value("0")
          .doc(fmt::format("Tokens every text context is zero-padded to before the text embedding, as the official "
                           "model does (longer contexts are refused); synthetic contexts are this long unless "
                           "data.text_tokens says otherwise. 0 keeps {} (512; 16 for tiny).",
                           keeps)),
      wanfw::option(prefix + "vace_layers", T::IntegerList)
          .value("[]")
          .doc(fmt::format("VACE: the blocks after which the control branch adds its hints, one VACE block each, "
                           "ascending from 0; [] keeps {} (none for a base model).",
                           keeps)),
      wanfw::option(prefix + "vace_in_dim", T::Integer)
          .value("0")
          .doc(fmt::format("VACE: channels of the control context (2 x latent channels + 64 mask channels); 0 "
                           "keeps {} (96).",
                           keeps)),
  };
}

WanConfig config_from_options(const wanfw::Options& o, const std::string& prefix, const WanConfig* base) {
  const std::string preset_option = prefix + "preset";
  WanConfig c;
  const std::string preset = o.string(preset_option);
  if (preset.empty() && base != nullptr) {
    c = *base;
  } else {
    try {
      c = wan_preset(preset);
    } catch (const wanfw::Error& e) {
      o.fail(preset_option, e.what());
    }
  }
  for (auto [name, field] : {std::pair{"dim", &c.dim}, {"ffn_dim", &c.ffn_dim}, {"num_heads", &c.num_heads},
                             {"num_layers", &c.num_layers}, {"in_dim", &c.in_dim}, {"out_dim", &c.out_dim},
                             {"text_dim", &c.text_dim}, {"text_len", &c.text_len}})
    if (o.integer(prefix + name) > 0) *field = o.integer(prefix + name);
  if (!o.integers(prefix + "vace_layers").empty()) c.vace_layers = o.integers(prefix + "vace_layers");
  if (o.integer(prefix + "vace_in_dim") > 0) c.vace_in_dim = o.integer(prefix + "vace_in_dim");
  if (o.integer(prefix + "vace_in_dim") > 0 && !c.has_vace())
    o.fail(prefix + "vace_in_dim", "sets the channels of a VACE model's control context, but this model has no VACE "
                                   "branch",
           "set vace_layers (the blocks that get hints) as well, or choose a VACE preset");
  if (o.integer(prefix + "vace_in_dim") < 0)
    o.fail(prefix + "vace_in_dim", "must be positive (0 keeps the preset's)");
  try {
    c.validate_vace();
  } catch (const wanfw::Error& e) {
    o.fail(prefix + "vace_layers", e.what());
  }
  try {
    c.validate();
  } catch (const wanfw::Error& e) {
    o.fail(preset_option, e.what(), "adjust dim / num_heads so that the head dim splits for RoPE");
  }
  return c;
}

std::vector<wanfw::OptionSpec> timestep_options(bool fixed) {
  std::vector<std::string> methods = {"uniform", "logit_normal", "shift"};
  if (fixed) methods.push_back("fixed");
  std::vector<wanfw::OptionSpec> out = {
      wanfw::option("timestep_sampling", T::Choice)
          .value("uniform")
          .choices(methods)
          .doc(fixed ? "How s (= t / 1000) is drawn: uniform, sigmoid of a normal, uniform then shifted, or fixed: one "
                       "of `timesteps`, equally likely."
                     : "How s (= t / 1000) is drawn: uniform, sigmoid of a normal, or uniform then shifted."),
      wanfw::option("shift", T::Number)
          .value("5.0")
          .doc(fixed ? "k in s' = k s / (1 + (k - 1) s) for shift sampling and the fixed timesteps."
                     : "k in s' = k s / (1 + (k - 1) s) for shift sampling."),
      wanfw::option("logit_mean", T::Number).value("0.0").doc("Mean of the normal for logit_normal sampling."),
      wanfw::option("logit_std", T::Number).value("1.0").doc("Standard deviation for logit_normal sampling."),
      wanfw::option("min_timestep", T::Number).value("0").doc("Lowest timestep drawn (0..1000 scale)."),
      wanfw::option("max_timestep", T::Number).value("1000").doc("Highest timestep drawn (0..1000 scale)."),
      wanfw::option("validation_timesteps", T::NumberList)
          .value("[100, 300, 500, 700, 900]")
          .doc("Fixed timesteps of the validation loss (those outside the trained range are skipped)."),
  };
  if (fixed)
    out.push_back(wanfw::option("timesteps", T::NumberList)
                      .value("[1000, 750, 500, 250]")
                      .doc("The timesteps of fixed sampling (0..1000), each shifted: with `shift` equal to "
                           "sample_shift, the levels an N-step sampler visits."));
  return out;
}

TimestepSampling timestep_sampling_from(const wanfw::Options& o, double lo, double hi, const std::string& range_option) {
  TimestepSampling s;
  s.method = sigma_distribution(o.string("timestep_sampling"));
  s.shift = o.number("shift");
  s.logit_mean = o.number("logit_mean");
  s.logit_std = o.number("logit_std");
  s.min_sigma = o.number("min_timestep") / 1000.0;
  s.max_sigma = o.number("max_timestep") / 1000.0;
  if (s.shift <= 0) o.fail("shift", "must be positive");
  if (!(s.min_sigma >= 0 && s.min_sigma < s.max_sigma && s.max_sigma <= 1))
    o.fail("min_timestep", "need 0 <= min_timestep < max_timestep <= 1000");
  s.min_sigma = std::max(s.min_sigma, lo);
  s.max_sigma = std::min(s.max_sigma, hi);
  if (!(s.min_sigma < s.max_sigma))
    o.fail(range_option, fmt::format("it covers timesteps [{}, {}], none of [min_timestep, max_timestep]", lo * 1000,
                                     hi * 1000));
  if (s.method == SigmaDistribution::Fixed) {
    for (const double t : o.numbers("timesteps")) {
      const double sigma = shifted(t / 1000.0, s.shift);
      if (!(t > 0 && t <= 1000) || sigma < s.min_sigma - 1e-9 || sigma > s.max_sigma + 1e-9)
        o.fail("timesteps", fmt::format("{} (s = {:.4f} after the shift) lies outside the trained range [{}, {}]", t,
                                        sigma, s.min_sigma * 1000, s.max_sigma * 1000));
      s.fixed.push_back(sigma);
    }
    if (s.fixed.empty()) o.fail("timesteps", "fixed timestep sampling needs at least one timestep");
  }
  return s;
}

std::vector<double> validation_timesteps_from(const wanfw::Options& o, const TimestepSampling& s) {
  const std::vector<double> given = o.numbers("validation_timesteps");
  std::vector<double> kept;
  for (const double t : given) {
    if (t < 0 || t > 1000) o.fail("validation_timesteps", fmt::format("{} lies outside 0..1000", t));
    if (t / 1000.0 >= s.min_sigma && t / 1000.0 <= s.max_sigma) kept.push_back(t);
  }
  if (kept.empty())
    o.fail("validation_timesteps", fmt::format("none of [{}] lies in the trained range [{}, {}]", fmt::join(given, ", "),
                                               s.min_sigma * 1000, s.max_sigma * 1000));
  return kept;
}

wanfw::OptionSpec attention_option() {
  return wanfw::option("attention", T::Choice)
      .value("auto")
      .choices(attention_backend_names())
      .doc("Scaled-dot-product attention kernel: auto lets ATen choose per call (flash or cuDNN for bf16/fp16 on a "
           "GPU, memory-efficient where they do not apply, math last); flash, efficient, cudnn or math runs only "
           "that one, and a call it cannot take stops the run naming it. The kernel used is logged.");
}

std::vector<wanfw::OptionSpec> sampler_options(double guidance, const std::string& guidance_doc,
                                               const std::string& size_doc) {
  return {
      wanfw::option("sample_steps", T::Integer).value("20").doc("Steps of `wanfw sample`, 1 to 1000."),
      wanfw::option("sample_solver", T::Choice)
          .value("euler")
          .choices({"euler", "renoise"})
          .doc("euler: x += (s' - s) v, the official sampler; renoise: each step predicts x0 = x - s v and "
               "noises it afresh to the next level, x = (1 - s') x0 + s' eps (how few-step DMD students sample)."),
      wanfw::option("preview_steps", T::Integer).value("10").doc("Euler steps of the preview at each validation, 1 to 1000."),
      wanfw::option("sample_guidance", T::Number).value(fmt::format("{:.1f}", guidance)).doc(guidance_doc),
      wanfw::option("sample_shift", T::Number)
          .value("5.0")
          .doc("Shift k of the sampling schedule s' = k s / (1 + (k-1) s)."),
      wanfw::option("sample_size", T::String).value("\"\"").doc(size_doc),
  };
}

SamplerSettings sampler_settings_from(const wanfw::Options& o) {
  SamplerSettings s;
  s.steps = o.integer("sample_steps");
  s.preview_steps = o.integer("preview_steps");
  s.guidance = o.number("sample_guidance");
  s.shift = o.number("sample_shift");
  s.solver = o.string("sample_solver");
  s.size = bucket_option(o, "sample_size");
  // The schedule has 1000 timesteps: a sampler of more steps would visit the same levels again.
  constexpr std::int64_t kMostSteps = 1000;
  for (const auto& [name, steps] : {std::pair{"sample_steps", s.steps}, std::pair{"preview_steps", s.preview_steps}})
    if (steps < 1 || steps > kMostSteps)
      o.fail(name, fmt::format("must lie in [1, {}] (the schedule's timesteps), got {}", kMostSteps, steps),
             "the Wan models sample well in 20 to 50 steps; previews need fewer");
  if (s.shift <= 0) o.fail("sample_shift", "must be positive");
  return s;
}

std::optional<wanfw::Bucket> bucket_option(const wanfw::Options& o, const char* name) {
  if (o.string(name).empty()) return std::nullopt;
  try {
    return wanfw::Bucket::parse(o.string(name));
  } catch (const wanfw::Error& e) {
    o.fail(name, e.what());
  }
}

}  // namespace wan
