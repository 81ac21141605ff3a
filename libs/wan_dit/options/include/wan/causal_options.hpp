#pragma once
// The options that make a Wan model a causal (streaming) student: block-causal self-attention
// over chunks of latent frames (wan/causal_attention.hpp), the teacher-forcing objective it trains
// with, and the streaming sampler's few steps (wan/causal_sampler.hpp).

#include <optional>
#include <vector>

#include "wan/causal_attention.hpp"
#include "wan/causal_sampler.hpp"
#include "wanfw/options.hpp"

namespace wan {

struct CausalSettings {
  std::optional<CausalLayout> layout;  ///< none: a bidirectional model
  std::vector<double> steps;           ///< the student's steps on 0..1000, before the sampling shift's warp
  double context_timestep = 0;
  bool enabled() const { return layout.has_value(); }
};

/// `causal.frames_per_chunk` (0: bidirectional), `causal.window_frames`, `causal.sink_frames`,
/// `causal.steps` and `causal.context_timestep`.
std::vector<wanfw::OptionSpec> causal_options();

/// Those options read and checked (a layout that cannot work, steps out of order: errors naming
/// the option).
CausalSettings causal_settings_from(const wanfw::Options& options);

}  // namespace wan
