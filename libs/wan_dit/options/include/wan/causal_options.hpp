#pragma once
// The options that make a Wan model a causal (streaming) student: block-causal self-attention
// over chunks of latent frames (wan/causal_attention.hpp), the teacher-forcing objective it trains
// with, and the streaming sampler's few steps (wan/causal_sampler.hpp).

#include <optional>
#include <string_view>
#include <vector>

#include "wan/causal_attention.hpp"
#include "wan/causal_sampler.hpp"
#include "wanfw/options.hpp"

namespace wan {

struct CausalSettings {
  std::optional<CausalLayout> layout;  ///< none: a bidirectional model
  std::vector<double> steps;           ///< the student's steps on 0..1000, before the sampling shift's warp
                                       ///< (empty where the model's own steps serve)
  double context_timestep = 0;
  bool enabled() const { return layout.has_value(); }
};

/// `causal.frames_per_chunk` (0: bidirectional; its text says how the plugin trains it: `training`),
/// `causal.window_frames`, `causal.sink_frames`, `causal.context_timestep` and, where the model has
/// no steps of its own (`own_steps`), `causal.steps`.
std::vector<wanfw::OptionSpec> causal_options(std::string_view training, bool own_steps = true);

/// Those options read and checked (a layout that cannot work, steps out of order: errors naming
/// the option); `own_steps` as causal_options'.
CausalSettings causal_settings_from(const wanfw::Options& options, bool own_steps = true);

}  // namespace wan
