#pragma once
// The names of a Wan DiT's weights: the official names and the diffusers conversion's, and which
// layers can carry an adapter. From names and the config alone; no tensors.

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "wan/wan_config.hpp"

namespace wan {

enum class WeightLayout { Official, Diffusers };

/// The official name of a diffusers key ("condition_embedder.time_proj.weight" ->
/// "time_projection.1.weight"); official names pass through unchanged.
std::string official_name(const std::string& key, WeightLayout layout);

/// The layers that can carry an adapter, by official module name ("blocks.0.self_attn.q", and a VACE
/// model's "vace_blocks.0.ffn.0"), with their weights' shape [out, in], in module order. From the
/// config alone (no weights).
std::vector<std::pair<std::string, std::array<std::int64_t, 2>>> adaptable_layers(const WanConfig& config);

}  // namespace wan
