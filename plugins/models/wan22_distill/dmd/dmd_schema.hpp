#pragma once
// The options of `objective: dmd` (dmd_settings.hpp): their schema, and the settings read from
// them, checked against each other and against the shared settings.

#include <vector>

#include "distill_settings.hpp"
#include "dmd/dmd_settings.hpp"
#include "wan/wan_config.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// objective, generator_steps, generator_shift, real_guidance, critic_updates_per_generator_update,
/// critic_lr_scale, critic_lora.*, shared_base, score levels, regression_weight.
std::vector<wanfw::OptionSpec> dmd_options();

/// The DMD settings; throws through `o.fail` for options that contradict each other. `student`
/// and `teacher` are the networks' configs, `common` the distillation's other settings, `expert`
/// the teacher's (one expert is refused: the generator samples every level; both need a shared
/// base).
DmdSettings dmd_settings_from(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                              const DistillSettings& common, wan::Expert expert);

}  // namespace wan_distill
