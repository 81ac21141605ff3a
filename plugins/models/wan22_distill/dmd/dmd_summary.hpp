#pragma once
// `wanfw model-info`'s DMD lines.

#include <string>

#include "distill_settings.hpp"
#include "dmd/dmd_settings.hpp"
#include "wan/lora.hpp"
#include "wan/wan_config.hpp"
#include "wanfw/options.hpp"
#include "wanfw/plugin.hpp"

namespace wan_distill {

/// The generator's levels as the log and model-info print them: "1.0000, 0.8824, 0.6522".
std::string levels_text(const DmdSettings& dmd);

/// What each network of a DMD run holds between steps, in bytes: trained ones with their
/// gradients and AdamW moments (adapters: float32 with theirs), frozen ones their weights.
struct DmdBytes {
  double teacher = 0, generator = 0, critic = 0;  ///< separate networks
  double shared_base = 0, adapters = 0;           ///< one base and both adapter sets (0: no adapters)
  double separate() const { return teacher + generator + critic; }
  double shared() const { return shared_base + adapters; }
};
DmdBytes dmd_bytes(const DmdSettings& dmd, const wan::WanConfig& student, const wan::WanConfig& teacher,
                   const wan::LoraSettings& generator_lora, const std::string& dtype, const std::string& teacher_dtype);

/// The phases, the generator's levels, guidance, dmd_memory and (`verdict`: where no memory plan
/// gives one) dmd_gpu_memory of the config.
std::string dmd_summary(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                        const DistillSettings& common, bool expert_teacher, const wanfw::TrainingLayout& layout,
                        bool verdict);

/// Before activations, the memory of the arrangement the config chose and of the others.
std::string dmd_memory(const DmdSettings& dmd, const DmdBytes& bytes);

/// The verdict per GPU: every network the config's arrangement holds (as `layout` places it) and
/// the activations of the larger network a phase trains, against 24 and 80 GB.
std::string dmd_gpu_memory(const DmdSettings& dmd, const DmdBytes& bytes, const wan::WanConfig& student,
                           const wan::WanConfig& teacher, bool gradient_checkpointing,
                           const wanfw::TrainingLayout& layout);

}  // namespace wan_distill
