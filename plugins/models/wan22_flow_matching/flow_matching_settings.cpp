// The wan22_flow_matching plugin's options read into its settings and checked against the model's
// dimensions (flow_matching_settings.hpp).
#include "flow_matching_settings.hpp"

#include <fmt/format.h>

#include "causal_student.hpp"
#include "wan/causal_options.hpp"
#include "wan/wan_options.hpp"
#include "wanfw/error.hpp"

namespace wan_fm {

/// Every option besides the dimensions, checked against them.
FlowMatchingSettings settings_from(const wanfw::Options& o, const wan::WanConfig& config) {
  FlowMatchingSettings s;
  s.task = wan::parse_task(o.string("task"));
  s.last_frame = o.boolean("last_frame");
  if (s.last_frame && s.task != wan::Task::I2V)
    o.fail("last_frame", fmt::format("a last frame conditions the i2v task, not {}", wan::task_name(s.task)),
           "set task: i2v (Wan2.2 I2V-A14B), or last_frame: false");
  s.bell_weighting = o.string("loss_weighting") == "bell";
  s.sampler = wan::sampler_settings_from(o);
  s.sampler.vace_scales = o.numbers("sample_vace_scale");
  if (!s.sampler.vace_scales.empty() && !config.has_vace())
    o.fail("sample_vace_scale", "scales a VACE model's hints, but this model has no VACE branch",
           "choose a VACE preset or set model.vace_layers, or remove sample_vace_scale");
  if (s.sampler.vace_scales.size() > 1 && s.sampler.vace_scales.size() != config.vace_layers.size())
    o.fail("sample_vace_scale",
           fmt::format("{} scales for the model's {} hints", s.sampler.vace_scales.size(), config.vace_layers.size()),
           "give one scale, or one for each entry of vace_layers");

  // Experts: the boundary comes from the preset (A14B) or the config.
  s.expert = wan::parse_expert(o.string("expert"));
  if (o.number("boundary") != 0 && !(o.number("boundary") > 0 && o.number("boundary") < 1000))
    o.fail("boundary", fmt::format("{} lies outside the timesteps (0, 1000)", o.number("boundary")),
           "875 for Wan2.2 T2V-A14B, 900 for I2V-A14B; 0 takes the preset's");
  if (o.number("boundary") != 0 && s.expert == Expert::None)
    o.fail("boundary",
           "a boundary splits the timesteps between two experts, but the run trains one network "
           "(expert: none)",
           "set model.expert (high_noise, low_noise or both), or remove boundary");
  const double boundary = o.number("boundary") > 0 ? o.number("boundary") : static_cast<double>(config.expert_boundary);
  if (s.expert == Expert::None && config.expert_boundary > 0 && o.number("boundary") == 0)
    o.fail("expert",
           fmt::format("preset {} is two experts split at t = {}: say which to train", config.preset,
                       config.expert_boundary),
           "set model.expert to high_noise, low_noise or both");
  if (s.expert != Expert::None) {
    if (!(boundary > 0 && boundary < 1000))
      o.fail("boundary",
             fmt::format("expert: {} needs a boundary between 0 and 1000; preset {} has none", o.string("expert"),
                         config.preset),
             "set model.boundary (875 for Wan2.2 T2V-A14B, 900 for I2V-A14B)");
    s.boundary = boundary / 1000.0;
  }
  // A single expert trains on its side of the boundary, within [min_timestep, max_timestep].
  const double lo = s.expert == Expert::HighNoise ? s.boundary : 0.0;
  const double hi = s.expert == Expert::LowNoise ? s.boundary : 1.0;
  s.timesteps = wan::timestep_sampling_from(o, lo, hi, "expert");
  s.validation_timesteps = wan::validation_timesteps_from(o, s.timesteps);
  s.experts = wan_fm::expert_controls_from(o, s.expert, s.boundary, s.timesteps);
  s.lora = wan::lora_settings_from(o, config, s.expert);
  s.causal = wan::causal_settings_from(o);
  if (s.causal.enabled()) {
    if (s.expert == Expert::Both && s.timesteps.method == wan::SigmaDistribution::Fixed &&
        o.string("causal.training") == "teacher_forcing")
      o.fail("timestep_sampling",
             "an expert pair's causal student draws each sample's chunk levels on one expert's side, and fixed "
             "levels cannot be drawn on a side",
             "draw the timesteps (uniform, logit_normal or shift), or train one expert");
    if (s.task == wan::Task::I2V || config.has_vace())
      o.fail("causal.frames_per_chunk",
             fmt::format("a causal student makes text to video, or video from a first frame (ti2v); {} is not "
                         "supported yet",
                         config.has_vace() ? "a VACE model" : "i2v's concatenated image channels"),
             "set task: t2v or ti2v, or causal.frames_per_chunk: 0");
    if (s.task == wan::Task::TI2V && !s.causal.layout->independent_first_frame)
      o.fail("causal.independent_first_frame",
             "a ti2v causal student's first frame is the image, a chunk of its own, passed into the cache",
             "set causal.independent_first_frame: true (latent frames 1 + k x frames_per_chunk)");
  }
  causal_training_from(o, s);
  s.new_vace_branch = o.string("vace_branch") == "new";
  if (s.new_vace_branch && !config.has_vace())
    o.fail("vace_branch", "a new VACE branch needs a VACE model", "choose a VACE preset or set model.vace_layers");
  if (s.new_vace_branch && o.string("weights").empty())
    o.fail("vace_branch", "vace_branch: new adds a branch to the base model of model.weights, which is empty",
           "set model.weights to a base model's checkpoint, or leave vace_branch: checkpoint");
  // A VACE model trains its branch (whole, or through adapters); the base stays frozen.
  s.fp8_base = wan::fp8_base_from(o, "", !s.lora.enabled() && !config.has_vace());
  s.activation_offload = wan::activation_offload_from(o);
  s.recompute_chunks = wan::recompute_chunks_from(o);

  const std::int64_t expected_in = wan::task_in_dim(config, s.task);
  if (config.in_dim != expected_in)
    o.fail("task",
           fmt::format("the {} task feeds the model {} input channels (out_dim {}{}), but in_dim is {}",
                       wan::task_name(s.task), expected_in, config.out_dim,
                       s.task == wan::Task::I2V ? " x 2 + 4 mask channels" : "", config.in_dim),
           s.task == wan::Task::I2V ? "use preset wan2.2-i2v-a14b, or set in_dim"
                                    : "use a t2v/ti2v preset, or set in_dim");
  return s;
}

}  // namespace wan_fm
