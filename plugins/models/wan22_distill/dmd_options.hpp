#pragma once
// The options of `objective: dmd` (dmd_settings.hpp), checked against the rest of the config,
// and the DMD model built from them.

#include <memory>
#include <string>
#include <vector>

#include "distill_model.hpp"
#include "dmd_settings.hpp"
#include "frozen_teacher.hpp"
#include "wanfw/plugin.hpp"

namespace wan_distill {

/// objective, generator_steps, real_guidance, critic_updates_per_generator_update, critic_lr_scale,
/// critic_lora.*, shared_base, score levels, regression_weight.
std::vector<wanfw::OptionSpec> dmd_options();

/// The DMD settings; throws through `o.fail` for options that contradict each other. `student`
/// and `teacher` are the networks' configs, `common` the distillation's other settings.
DmdSettings dmd_settings_from(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                              const DistillSettings& common, bool expert_teacher);

/// The generator (`student`, initialised, its adapters attached) and the critic (a copy of the
/// teacher, or adapters on the generator's base), with the teacher (dropped when the base is shared).
std::unique_ptr<wanfw::Model> make_dmd_model(const wanfw::Options& o, wan::WanDiT student,
                                             std::shared_ptr<FrozenTeacher> teacher, DistillSettings common,
                                             DmdSettings dmd, const wan::WanPlacement& placement);

/// `wanfw model-info`'s DMD lines: the phases, guidance and dmd_memory of the config's settings.
std::string dmd_summary(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                        const DistillSettings& common, bool expert_teacher);

/// `wanfw model-info`: the memory of the arrangement the config chose and of the others.
std::string dmd_memory(const DmdSettings& dmd, const wan::WanConfig& student, const wan::WanConfig& teacher,
                       const wan::LoraSettings& generator_lora, const std::string& dtype,
                       const std::string& teacher_dtype);

}  // namespace wan_distill
