#pragma once
// `wanfw model-info`'s DMD lines.

#include <string>

#include "distill_settings.hpp"
#include "dmd/dmd_settings.hpp"
#include "wan/wan_config.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// The generator's levels as the log and model-info print them: "1.0000, 0.8824, 0.6522".
std::string levels_text(const DmdSettings& dmd);

/// The phases, the generator's levels, guidance and dmd_memory of the config's settings.
std::string dmd_summary(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                        const DistillSettings& common, bool expert_teacher);

/// The memory of the arrangement the config chose and of the others.
std::string dmd_memory(const DmdSettings& dmd, const wan::WanConfig& student, const wan::WanConfig& teacher,
                       const wan::LoraSettings& generator_lora, const std::string& dtype,
                       const std::string& teacher_dtype);

}  // namespace wan_distill
