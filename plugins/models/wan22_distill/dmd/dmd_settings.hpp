#pragma once
// The settings of `objective: dmd`: distribution matching distillation (DMD2) of a few-step
// generator against the frozen teacher (the real score, with guidance) and a trained critic (the
// fake score, a flow-matching model of the generator's own samples).

#include <cstdint>
#include <vector>

#include "wan/flow_matching.hpp"
#include "wan/lora.hpp"

namespace wan_distill {

struct DmdSettings {
  std::int64_t generator_steps = 4;  ///< the generator samples in this many steps ...
  double generator_shift = 5.0;      ///< ... at the levels of the schedule shifted by this
  double real_guidance = 4.5;        ///< the real score's v_u + g (v_c - v_u) (the official Wan form)
  /// Both experts: the low-noise expert's real-score guidance (the high-noise one takes real_guidance).
  double low_noise_real_guidance = 4.5;
  /// Whether any real score is guided (a negative prompt is needed).
  bool guided() const { return real_guidance != 1.0 || low_noise_real_guidance != 1.0; }
  int critic_updates = 5;            ///< critic optimizer steps per generator step (TTUR)
  double critic_lr_scale = 1.0;      ///< the critic's learning rate: optimizer.lr x this
  /// Levels the scores are evaluated at: uniform in [min_level, max_level], then shifted by score_shift.
  double min_level = 0.02, max_level = 0.98, score_shift = 5.0;
  double regression_weight = 0.0;  ///< + w mean (v_G - v_real)^2 at the generator's input point
  wan::LoraSettings critic_lora;   ///< adapters on the critic (rank 0: every critic weight trains)
  /// Generator and critic are adapters on one frozen copy of the teacher's weights, which is also
  /// the real score with both adapter sets off.
  bool shared_base = false;

  /// The generator's levels s_0 = 1 > s_1 > ... > s_{N-1}: sampling_schedule(N, generator_shift) without its final 0.
  std::vector<double> levels() const {
    std::vector<double> s = wan::sampling_schedule(generator_steps, generator_shift);
    s.pop_back();
    return s;
  }
};

}  // namespace wan_distill
