#pragma once
// What a run that trains both A14B experts sets per expert: the high-noise expert overtrains
// where the low-noise one can take far more, so each has its own learning-rate scale (its own
// parameter group, logged as lr/high_noise and lr/low_noise) and its own timestep range.
//
// A range keeps the share of samples each expert gets: a sample's s is drawn as without ranges
// and routed by the boundary; then its place on its expert's side of the boundary is carried
// linearly into that expert's range (the shape of the distribution on that side kept, as
// min_timestep / max_timestep do for the whole run). Without a range set, s is left untouched.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "wan/flow_matching.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/model.hpp"
#include "wanfw/options.hpp"

namespace wan_fm {

struct ExpertControl {
  double lr_scale = 1.0;
  double min_sigma = 0.0, max_sigma = 1.0;  ///< the expert's range (timestep / 1000)
};

struct ExpertControls {
  bool ranged = false;  ///< some range was set: draws are carried into the ranges
  double boundary = 0.0;
  double side_min = 0.0, side_max = 1.0;  ///< the run's range the draws come from (min/max_timestep)
  ExpertControl high, low;
  /// high_noise.share: each step's share of high-noise samples, drawn on their side; unset: each
  /// sample's draw picks its side.
  std::optional<double> high_share;
};

/// high_noise.{lr_scale, min_timestep, max_timestep} and low_noise.{...}.
std::vector<wanfw::OptionSpec> expert_control_options();

/// The controls of `expert` (Both; any other expert setting refuses them) split at `boundary`
/// (sigma units), within the run's range `sampling`; a ConfigError names the option at fault.
ExpertControls expert_controls_from(const wanfw::Options& o, wan::Expert expert, double boundary,
                                    const wan::TimestepSampling& sampling);

/// Each sample's s [B]: drawn by `sampling` (on the side its step place gives it under
/// high_noise.share), then carried into the experts' ranges.
torch::Tensor draw_expert_sigma(const wanfw::Batch& batch, const wan::TimestepSampling& sampling,
                                const ExpertControls& controls);

/// A causal student's chunk levels [B, chunks] for an expert pair: each sample's side first (the
/// place high_noise.share gives it, or its "expert_side" stream with the sampling's own chance
/// of s >= boundary), then every chunk's level on that side, carried into the experts' ranges. A
/// sample's chunks and its clean context are then one expert's, as each expert's cache in a rollout.
torch::Tensor draw_expert_chunk_sigma(const wanfw::Batch& batch, const wan::TimestepSampling& sampling,
                                      const ExpertControls& controls, std::int64_t chunks);

/// `sigma` [B] carried into the experts' ranges (unchanged when no range is set).
torch::Tensor into_expert_ranges(const torch::Tensor& sigma, const ExpertControls& controls);

/// One parameter group an expert: its trained parameters (its adapters under LoRA), at the LoRA
/// scale times the expert's, named "high_noise" and "low_noise".
std::vector<wanfw::ParameterGroup> expert_groups(const wan::WanDenoiser& denoiser, const wan::LoraSettings& lora,
                                                 const ExpertControls& controls);

}  // namespace wan_fm
