#include "wan/fp8_files.hpp"

#include <fmt/format.h>
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "wanfw/io/bounded_input.hpp"
#include "wanfw/error.hpp"

namespace wan {

namespace {

/// "<l>" of "<l>.weight".
std::string layer_of(const std::string& name) {
  const std::string suffix = ".weight";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0
             ? name.substr(0, name.size() - suffix.size())
             : name;
}

[[noreturn]] void refuse(const wanfw::SafetensorsCheckpoint& checkpoint, const std::string& tensor,
                         const std::string& problem) {
  throw wanfw::FileError(fmt::format("{}: tensor '{}' {}", checkpoint.file_of(tensor).string(), tensor, problem),
                         "wanfw reads fp8 weights scaled as ComfyUI (scale_weight, comfy_quant with weight_scale), "
                         "Kijai and musubi-tuner write them, or unscaled; convert others to bf16");
}

/// The comfy_quant JSON's format, checked.
void check_comfy_quant(const wanfw::SafetensorsCheckpoint& checkpoint, const std::string& key) {
  const torch::Tensor bytes = checkpoint.tensor(key).contiguous();
  const std::string text = bytes.nbytes() == 0 ? std::string()
                                               : std::string(static_cast<const char*>(bytes.data_ptr()),
                                                             static_cast<std::size_t>(bytes.nbytes()));
  const nlohmann::json spec =
      wanfw::parse_bounded_json(text, 4, [&](const std::string& problem) { refuse(checkpoint, key, problem); });
  const std::string format = spec.is_object() && spec.contains("format") && spec["format"].is_string()
                                 ? spec["format"].get<std::string>()
                                 : std::string();
  if (format != "float8_e4m3fn" && format != "float8_e5m2")
    refuse(checkpoint, key, fmt::format("uses ComfyUI's quantization format '{}', which wanfw does not read", format));
}

/// The scaling the stored scale's shape says for `values`, or nothing.
std::optional<Fp8Scaling> scaling_of(const torch::Tensor& scale, const torch::Tensor& values) {
  if (scale.numel() == 1 && scale.dim() <= 1) return Fp8Scaling::PerTensor;
  if (values.dim() != 2) return std::nullopt;
  const std::int64_t out = values.size(0), in = values.size(1);
  if (scale.sizes() == at::IntArrayRef({out, 1})) return Fp8Scaling::PerChannel;
  if (in % 64 == 0 && scale.sizes() == at::IntArrayRef({out, in / 64, 1})) return Fp8Scaling::Block64;
  return std::nullopt;
}

}  // namespace

std::optional<Fp8Weight> read_fp8_weight(const wanfw::SafetensorsCheckpoint& checkpoint, const std::string& name) {
  const torch::Tensor values = checkpoint.tensor(name);
  if (!at::isFloat8Type(values.scalar_type())) return std::nullopt;
  if (values.scalar_type() != at::kFloat8_e4m3fn && values.scalar_type() != at::kFloat8_e5m2)
    refuse(checkpoint, name,
           fmt::format("is {}, an fp8 format wanfw does not read", c10::toString(values.scalar_type())));
  const std::string layer = layer_of(name);
  if (checkpoint.contains(layer + ".comfy_quant")) check_comfy_quant(checkpoint, layer + ".comfy_quant");
  std::string scale_key;
  for (const std::string& key : {layer + ".scale_weight", layer + ".weight_scale"})
    if (checkpoint.contains(key)) scale_key = key;
  Fp8Weight out;
  out.values = values.clone();
  if (scale_key.empty()) {  // a plain cast to fp8
    out.scaling = Fp8Scaling::PerTensor;
    out.scales = at::ones({1}, torch::kFloat32);
    return out;
  }
  const torch::Tensor scale = checkpoint.tensor(scale_key);
  const std::optional<Fp8Scaling> scaling = scaling_of(scale, values);
  if (!scaling)
    refuse(checkpoint, scale_key,
           fmt::format("has shape {}, which scales weight {} by no layout wanfw knows ([1], [out, 1], [out, in/64, 1])",
                       c10::str(scale.sizes()), c10::str(values.sizes())));
  if (!at::isFloatingType(scale.scalar_type()) || at::isFloat8Type(scale.scalar_type()))
    refuse(checkpoint, scale_key, fmt::format("is {}; a weight scale is a float", c10::toString(scale.scalar_type())));
  out.scaling = *scaling;
  out.scales =
      scale.to(torch::kFloat32).reshape(out.scaling == Fp8Scaling::PerTensor ? at::IntArrayRef({1}) : scale.sizes());
  if (!(at::isfinite(out.scales).all().item<bool>() && (out.scales > 0).all().item<bool>()))
    refuse(checkpoint, scale_key, "holds a scale that is not a finite positive number");
  return out;
}

}  // namespace wan
