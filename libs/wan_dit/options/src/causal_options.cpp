#include "wan/causal_options.hpp"

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wan {

std::vector<wanfw::OptionSpec> causal_options(std::string_view training, bool own_steps) {
  using T = wanfw::OptionType;
  std::vector<wanfw::OptionSpec> out = {
      wanfw::option("causal.frames_per_chunk", T::Integer)
          .value("0")
          .doc(fmt::format("A causal (streaming) student: self-attention over chunks of this many latent frames, "
                           "bidirectional within a chunk and causal across; {} and `wanfw sample` makes the video "
                           "chunk by chunk with a KV cache. 0: a bidirectional model. Self-Forcing's chunk is 3 "
                           "(4,680 tokens at 480p). t2v, or ti2v with independent_first_frame; one DiT (expert none).",
                           training)),
      wanfw::option("causal.independent_first_frame", T::Boolean)
          .value("false")
          .doc("Latent frame 0 a chunk of its own, then chunks of frames_per_chunk (1 + k x frames_per_chunk "
               "latent frames): the layout of i2v from a first frame (task ti2v), whose image is that chunk."),
      wanfw::option("causal.window_frames", T::Integer)
          .value("0")
          .doc("A local window: a chunk attends to the sink frames and the window_frames - sink_frames frames "
               "before its end (0: every earlier frame). Needed for videos past RoPE's 1024 latent frames."),
      wanfw::option("causal.sink_frames", T::Integer)
          .value("0")
          .doc("With a window: the first frames every chunk keeps attending to (attention sinks)."),
      wanfw::option("causal.context_timestep", T::Number)
          .value("0")
          .doc("The timestep of each made chunk's pass into the KV cache (0: clean)."),
  };
  if (own_steps)
    out.push_back(wanfw::option("causal.steps", T::NumberList)
                      .value("[1000, 750, 500, 250]")
                      .doc("The streaming sampler's steps a chunk, on 0..1000 and descending, warped by "
                           "sample_shift (1000, 750, 500, 250 at shift 5: 1000, 937.5, 833.3, 625)."));
  return out;
}

CausalSettings causal_settings_from(const wanfw::Options& o, bool own_steps) {
  CausalSettings s;
  if (own_steps) s.steps = o.numbers("causal.steps");
  s.context_timestep = o.number("causal.context_timestep");
  const std::int64_t frames = o.integer("causal.frames_per_chunk");
  if (frames < 0) o.fail("causal.frames_per_chunk", "must be 0 (a bidirectional model) or positive");
  if (frames == 0) {
    for (const char* name : {"causal.window_frames", "causal.sink_frames"})
      if (o.integer(name) != 0) o.fail(name, "needs causal.frames_per_chunk (a causal model)");
    if (o.boolean("causal.independent_first_frame"))
      o.fail("causal.independent_first_frame", "needs causal.frames_per_chunk (a causal model)");
    return s;
  }
  CausalLayout layout{frames, o.integer("causal.window_frames"), o.integer("causal.sink_frames"),
                      o.boolean("causal.independent_first_frame")};
  try {
    layout.validate();
  } catch (const wanfw::Error& e) {
    o.fail(layout.window_frames > 0 ? "causal.window_frames" : "causal.frames_per_chunk", e.what());
  }
  s.layout = layout;
  if (own_steps && s.steps.empty()) o.fail("causal.steps", "needs at least one step");
  for (std::size_t i = 0; i < s.steps.size(); ++i)
    if (!(s.steps[i] > 0 && s.steps[i] <= 1000) || (i > 0 && s.steps[i] >= s.steps[i - 1]))
      o.fail("causal.steps", fmt::format("must descend within (0, 1000]; got {} at position {}", s.steps[i], i),
             "Self-Forcing's: [1000, 750, 500, 250]");
  if (!(s.context_timestep >= 0 && s.context_timestep < 1000))
    o.fail("causal.context_timestep", "must lie in [0, 1000)");
  return s;
}

}  // namespace wan
