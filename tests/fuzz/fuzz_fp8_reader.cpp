// Fuzz target: an fp8 checkpoint from elsewhere (ComfyUI scaled fp8 or comfy_quant, Kijai,
// musubi-tuner, a plain cast), as wan::read_fp8_weight reads each of its ".weight" tensors. The
// input is the whole safetensors file. Reading fails with one of wanfw's errors, says the tensor is
// not fp8, or returns a weight that dequantizes as it is: e4m3 or e5m2 values, float32 scales,
// finite and positive, shaped as the scaling says, and a dequantized tensor of the values' shape.
// Anything else (a crash, a sanitizer report, another exception) is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>

#include "fuzz_memory_file.hpp"
#include "fuzz_target.hpp"
#include "wan/fp8_files.hpp"
#include "wanfw/error.hpp"

namespace {

bool scales_fit(const wan::Fp8Weight& w) {
  const at::Tensor& v = w.values;
  switch (w.scaling) {
    case wan::Fp8Scaling::PerTensor: return w.scales.sizes() == at::IntArrayRef({1});
    case wan::Fp8Scaling::PerChannel: return v.dim() == 2 && w.scales.sizes() == at::IntArrayRef({v.size(0), 1});
    case wan::Fp8Scaling::Block64:
      return v.dim() == 2 && v.size(1) % 64 == 0 && w.scales.sizes() == at::IntArrayRef({v.size(0), v.size(1) / 64, 1});
  }
  return false;
}

}  // namespace

WANFW_FUZZ_TARGET(fp8_reader) {
  static MemoryFile file("fp8.safetensors");
  file.write(data, size);
  try {
    const auto checkpoint = wanfw::SafetensorsCheckpoint::open(file.path);
    for (const std::string& name : checkpoint.names()) {
      if (name.size() < 7 || name.compare(name.size() - 7, 7, ".weight") != 0) continue;
      std::optional<wan::Fp8Weight> weight;
      try {
        weight = wan::read_fp8_weight(checkpoint, name);
      } catch (const wanfw::Error&) {
        continue;
      }
      if (!weight) continue;
      const at::ScalarType type = weight->values.scalar_type();
      if (type != at::kFloat8_e4m3fn && type != at::kFloat8_e5m2) std::abort();
      if (weight->scales.scalar_type() != at::kFloat || !scales_fit(*weight)) std::abort();
      if (!(weight->scales.isfinite().all().item<bool>() && (weight->scales > 0).all().item<bool>())) std::abort();
      if (wan::dequantize_fp8(*weight, at::kFloat).sizes() != weight->values.sizes()) std::abort();
    }
  } catch (const wanfw::Error&) {
    return 0;
  }
  return 0;
}
