#pragma once
// Reading adapter files in the layouts adapters are published in, checked against the model they
// are for. Every key, shape, value and metadata field is checked before anything is applied.
//
//   Wan / ComfyUI  diffusion_model.blocks.0.self_attn.q.lora_A.weight, lora_B.weight, .alpha
//   diffusers PEFT transformer.blocks.0.attn1.to_q.lora_A.weight, lora_B.weight; alpha in the
//                  file's "lora_adapter_metadata" (lora_alpha), else alpha = rank
//   kohya          lora_unet_blocks_0_self_attn_q.lora_down.weight, lora_up.weight, .alpha
//
// lora_down / lora_up are accepted for lora_A / lora_B in every layout, and the prefixes may be
// absent.

#include <filesystem>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "wan/wan_config.hpp"

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

}  // namespace wan
