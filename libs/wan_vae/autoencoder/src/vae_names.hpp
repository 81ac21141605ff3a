#pragma once
// The official Wan VAE checkpoints' tensor names (wan/modules/vae2_1.py and vae2_2.py, as the
// repackaged safetensors keep them) in diffusers' names, which the modules here register; a file's
// tensors matched to the parameters by those names and their shapes.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "wan/vae/vae_config.hpp"
#include "wanfw/io/safetensors.hpp"

namespace wan {

/// `official`'s diffusers name ("decoder.upsamples.4.shortcut.weight" ->
/// "decoder.up_blocks.1.resnets.0.conv_shortcut.weight"); a name already in diffusers' form
/// comes back unchanged.
std::string diffusers_vae_name(const std::string& official, const VaeConfig& config);

/// For each parameter of `expected` (diffusers name -> shape), the name of the tensor of `file`
/// that holds it: the file's names in diffusers' form (diffusers_vae_name), no parameter held
/// twice, none missing, none left over, every shape equal. Throws FileError naming `weights` and
/// the tensor.
std::map<std::string, std::string> match_vae_tensors(const wanfw::SafetensorsCheckpoint& file,
                                                     const std::filesystem::path& weights, const VaeConfig& config,
                                                     const std::map<std::string, std::vector<std::int64_t>>& expected);

}  // namespace wan
