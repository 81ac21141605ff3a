#pragma once
// Adapter files: reading the layouts adapters are published in, applying them to a DiT, and
// writing a DiT's adapters for the tools people load them with.
//
//   Wan / ComfyUI  diffusion_model.blocks.0.self_attn.q.lora_A.weight, lora_B.weight, .alpha
//   diffusers PEFT transformer.blocks.0.attn1.to_q.lora_A.weight, lora_B.weight; alpha in the
//                  file's "lora_adapter_metadata" (lora_alpha), else alpha = rank
//   kohya          lora_unet_blocks_0_self_attn_q.lora_down.weight, lora_up.weight, .alpha
//
// lora_down / lora_up are accepted for lora_A / lora_B in every layout, and the prefixes may be
// absent. An adapter's update of a layer is scale * (alpha / rank) * B A.

#include <filesystem>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "wan/lora.hpp"

namespace wan {

enum class AdapterLayout { Wan, Diffusers, Kohya };
const char* adapter_layout_name(AdapterLayout layout);

/// One layer's adapter as a file holds it.
struct LayerAdapter {
  at::Tensor A;  ///< [rank, in]
  at::Tensor B;  ///< [out, rank]
  double alpha = 0;
  std::string key;  ///< the file's key of A, for errors
};

struct AdapterFile {
  AdapterLayout layout = AdapterLayout::Wan;
  std::map<std::string, LayerAdapter> layers;  ///< by official layer name ("blocks.0.self_attn.q")
};

/// Reads an adapter of any layout above and checks it against `config`: every key must belong to
/// an adaptable layer of the model, each layer needs both matrices, their shapes must fit the
/// layer and each other. Throws wanfw::FileError naming the file and the key at fault.
AdapterFile read_adapter_file(const std::filesystem::path& file, const WanConfig& config);

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
