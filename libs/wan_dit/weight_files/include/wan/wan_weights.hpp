#pragma once
// Loading Wan DiT weights: the official layout (one file, or shards + index json) and the
// diffusers layout (its key names, transformer/ folders), detected automatically.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "wan/wan_dit.hpp"
#include "wan/weight_names.hpp"

namespace wan {

/// Checks, from the safetensors headers alone, that the checkpoint at `path` holds exactly the
/// parameters `config` describes with their shapes; returns the layout and, per official name,
/// the checkpoint key. Throws wanfw::FileError listing missing, unexpected and shape-mismatched
/// tensors together. Reads no tensor data.
/// With `new_branch`, a VACE config's checkpoint is a base model's: every parameter but the VACE
/// branch's (which then starts as the DiT built it).
WeightLayout check_wan_weights(const WanConfig& config, const std::filesystem::path& path,
                               const std::string& subfolder, std::map<std::string, std::string>* key_of = nullptr,
                               bool new_branch = false);

/// Copies every parameter of `model` from the checkpoint at `path` (a .safetensors file, an
/// index json, or a folder holding either; a diffusers pipeline folder is entered through
/// `subfolder`, e.g. "transformer"), converting dtypes. Reads through the file mapping, so a
/// checkpoint never needs twice its size in memory. Throws wanfw::FileError listing missing,
/// unexpected and shape-mismatched tensors together.
WeightLayout load_wan_weights(WanDiTImpl& model, const std::filesystem::path& path, const std::string& subfolder = "",
                              bool new_branch = false);

/// Writes `model` in the official layout to `folder`: official tensor names in
/// diffusion_pytorch_model.safetensors, or, past `max_shard_bytes`, in
/// diffusion_pytorch_model-0000N-of-0000M.safetensors shards listed by
/// diffusion_pytorch_model.safetensors.index.json; plus the official config.json (`model_type`
/// t2v, ti2v or i2v). Every file appears atomically.
void save_wan_weights(const WanDiTImpl& model, const std::filesystem::path& folder, const std::string& model_type,
                      std::int64_t max_shard_bytes);

}  // namespace wan
