// Fuzz target: an adapter file in model.lora.load, as wanfw reads it before applying it (every
// layout: Wan / ComfyUI, diffusers PEFT with its metadata, kohya). The input is the whole
// safetensors file, read against a small Wan DiT of two blocks. Reading either fails with one of
// wanfw's errors or returns adapters that can be applied as they are: each layer's A and B
// two-dimensional float32 of the layer's shapes, rank >= 1, every value finite, alpha finite and
// positive. Anything else (a crash, a sanitizer report, another exception) is a finding.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>

#include "fuzz_memory_file.hpp"
#include "fuzz_target.hpp"
#include "wan/adapter_reader.hpp"
#include "wan/weight_names.hpp"
#include "wanfw/error.hpp"

namespace {

/// The model the adapters are read for (the seed corpus is written for it): dim 8, ffn 16.
wan::WanConfig small_model() {
  wan::WanConfig config = wan::wan_preset("tiny");
  config.dim = 8;
  config.ffn_dim = 16;
  config.num_heads = 2;
  config.num_layers = 2;
  return config;
}

bool finite(const at::Tensor& t) { return t.isfinite().all().item<bool>(); }

}  // namespace

WANFW_FUZZ_TARGET(adapter_reader) {
  static MemoryFile file("adapter.safetensors");
  static const wan::WanConfig config = small_model();
  static const auto layers = wan::adaptable_layers(config);
  file.write(data, size);
  wan::AdapterFile adapter;
  try {
    adapter = wan::read_adapter_file(file.path, config);
  } catch (const wanfw::Error&) {
    return 0;
  }
  if (adapter.layers.empty()) std::abort();
  for (const auto& layer : adapter.layers) {
    const std::string& name = layer.first;
    const wan::LayerAdapter& entry = layer.second;
    const auto shape = std::find_if(layers.begin(), layers.end(), [&](const auto& l) { return l.first == name; });
    if (shape == layers.end()) std::abort();  // a layer the model does not adapt
    const at::Tensor &a = entry.A, &b = entry.B;
    if (!a.defined() || !b.defined() || a.dim() != 2 || b.dim() != 2) std::abort();
    if (a.scalar_type() != at::kFloat || b.scalar_type() != at::kFloat) std::abort();
    const std::int64_t rank = a.size(0);
    if (rank < 1 || a.size(1) != shape->second[1] || b.size(0) != shape->second[0] || b.size(1) != rank) std::abort();
    if (!finite(a) || !finite(b)) std::abort();
    if (!std::isfinite(entry.alpha) || entry.alpha <= 0) std::abort();
  }
  return 0;
}
