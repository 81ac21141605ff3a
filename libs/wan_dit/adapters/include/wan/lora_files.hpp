#pragma once
// Adapter files: applying them (read by wan/adapter_reader.hpp) to a DiT, and writing a DiT's
// adapters for the tools people load them with. An adapter's update of a layer is
// scale * (alpha / rank) * B A.

#include <filesystem>
#include <string>

#include "wan/adapter_reader.hpp"
#include "wan/lora.hpp"

namespace wan {

/// Applies `load` to `dit`: merged into the weights (W += scale * alpha / rank * B A), or, with
/// load.train, as the starting value of the trained adapters (which must be attached to the same
/// layers with the same rank; B is rescaled so the update is the file's). Returns the file's
/// layout. Throws naming the key.
AdapterLayout apply_adapter_file(WanDiTImpl& dit, const AdapterLoad& load);

/// Applies `settings` to one DiT (`expert`: "high_noise", "low_noise" or "" for a single DiT): the
/// adapters it loads without `train` are merged into the weights; with a rank, adapters are
/// attached (the base frozen) and started from the adapters loaded with `train`.
void apply_lora(WanDiTImpl& dit, const LoraSettings& settings, const std::string& expert);

/// Writes the adapters attached to `dit` to `folder`: wan_lora.safetensors (Wan / ComfyUI keys,
/// with alpha) and pytorch_lora_weights.safetensors (diffusers PEFT keys; alpha / rank folded into
/// B, lora_alpha = rank in its metadata, so loaders that ignore the metadata agree).
void write_adapter_files(const WanDiTImpl& dit, const std::filesystem::path& folder);

}  // namespace wan
