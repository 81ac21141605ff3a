#pragma once
// The wan22_flow_matching plugin's settings from its options.

#include "flow_matching_model.hpp"
#include "wanfw/options.hpp"

namespace wan_fm {

/// Every option besides the dimensions, read and checked against `config` (the task's input
/// channels, the experts and their boundary, timesteps, adapters, sampling, a last frame).
FlowMatchingSettings settings_from(const wanfw::Options& o, const wan::WanConfig& config);

}  // namespace wan_fm
