#pragma once
// The settings both objectives of `wan22_distill` share (dmd/dmd_settings.hpp adds DMD's own),
// read once from the plugin's options (distill_options.hpp) into types.

#include <cstdint>
#include <optional>
#include <vector>

#include <torch/types.h>

#include "wan/causal_options.hpp"
#include "wan/flow_matching.hpp"
#include "wan/lora.hpp"
#include "wanfw/data.hpp"

namespace wan_distill {

/// What the student learns. Velocity: the teacher's (guided) velocity at the same inputs
/// (distill_model.hpp). Dmd: distribution matching of a few-step generator (dmd/dmd_model.hpp).
enum class Objective { Velocity, Dmd };

/// Where the student's noisy inputs come from. Data: the data's latents noised to each level.
/// TeacherTrajectory (data-free, velocity): the teacher's own Euler steps from noise. Generator
/// (data-free, dmd): the generator's own steps from noise (backward simulation).
enum class Inputs { Data, TeacherTrajectory, Generator };

/// The `inputs` option's spelling, for messages.
const char* inputs_name(Inputs inputs);

struct DistillSettings {
  Objective objective = Objective::Velocity;
  wan::Task task = wan::Task::T2V;  ///< teacher and student alike
  Inputs inputs = Inputs::Data;
  wan::TimestepSampling timesteps;
  double velocity_weight = 1.0;
  double flow_matching_weight = 0.0;
  double guidance = 1.0;   ///< the teacher's guidance scale in the velocity target; 1: none
  torch::Tensor negative;  ///< [L, text_dim] negative context for guidance (undefined: zeros)
  std::int64_t trajectory_steps = 4;
  std::optional<wanfw::Bucket> latent_size;  ///< data-free t2v: the latents' frames x height x width
  std::vector<double> validation_timesteps;  ///< 0..1000
  wan::SamplerSettings sampler;              ///< the student's `wanfw sample` and preview
  wan::LoraSettings lora;                    ///< adapters on the student (rank 0: every weight trains)
  bool fp8_base = false;                     ///< base_dtype float8_e4m3fn: the student's frozen base in fp8
  bool teacher_fp8 = false;                  ///< teacher_base_dtype float8_e4m3fn
  bool activation_offload = false;           ///< checkpointed blocks' inputs wait in host memory
  std::int64_t recompute_chunks = 1;         ///< a checkpointed block recomputed in chunks of tokens
  /// A causal (streaming) generator (objective dmd): block-causal over chunks, trained on its own
  /// rollout with the KV cache (dmd/causal_rollout.hpp); its steps are generator_steps.
  wan::CausalSettings causal;
};

}  // namespace wan_distill
