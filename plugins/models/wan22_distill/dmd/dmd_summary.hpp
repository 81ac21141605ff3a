#pragma once
// `wanfw model-info`'s DMD lines.

#include <string>

#include "distill_settings.hpp"
#include "dmd/dmd_settings.hpp"
#include "wan/lora.hpp"
#include "wan/wan_config.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// The generator's levels as the log and model-info print them: "1.0000, 0.8824, 0.6522".
std::string levels_text(const DmdSettings& dmd);
/// "4.5", or "4 (high noise), 3 (low noise)" when the experts' real scores are guided apart.
std::string guidance_text(const DmdSettings& dmd);
/// A causal generator's chunks and how it trains, of `expert`'s networks (empty for a bidirectional one).
std::string causal_text(const DistillSettings& common, wan::Expert expert);

/// What each network of a DMD run holds between steps, in bytes (wan::dit_state_bytes and
/// wan::frozen_dit_bytes: the memory plan's own terms): trained ones with their gradients and AdamW
/// moments (adapters: float32 with theirs), frozen ones their weights.
struct DmdBytes {
  double teacher = 0, generator = 0, critic = 0;  ///< separate networks
  double shared_base = 0, adapters = 0;           ///< one base and both adapter sets (0: no adapters)
  double separate() const { return teacher + generator + critic; }
  double shared() const { return shared_base + adapters; }
};
DmdBytes dmd_bytes(const DmdSettings& dmd, const wan::WanConfig& student, const wan::WanConfig& teacher,
                   const wan::LoraSettings& generator_lora, const std::string& dtype, const std::string& teacher_dtype);

/// The phases, the generator's levels, guidance, and dmd_memory of the config. The verdict per GPU
/// is the memory plan's, which counts every network a step holds.
std::string dmd_summary(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                        const DistillSettings& common, wan::Expert expert);

/// Before activations, the memory of the arrangement the config chose and of the others.
std::string dmd_memory(const DmdSettings& dmd, const DmdBytes& bytes);

}  // namespace wan_distill
