#pragma once
// The official Wan VAE checkpoints' tensor names (wan/modules/vae2_1.py and vae2_2.py, as the
// repackaged safetensors keep them) in diffusers' names, which the modules here register.

#include <string>

#include "wan/vae/vae_config.hpp"

namespace wan {

/// `official`'s diffusers name ("decoder.upsamples.4.shortcut.weight" ->
/// "decoder.up_blocks.1.resnets.0.conv_shortcut.weight"); a name already in diffusers' form
/// comes back unchanged.
std::string diffusers_vae_name(const std::string& official, const VaeConfig& config);

}  // namespace wan
