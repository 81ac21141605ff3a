#include "wan/adapter_reader.hpp"

#include <array>
#include <regex>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "adapter_metadata.hpp"
#include "wan/weight_names.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/io/tensor_check.hpp"

namespace fs = std::filesystem;

namespace wan {

namespace {

/// An adapter's matrices and alphas pass the gate as weights.
wanfw::TensorRole adapter_role(const char* what) {
  wanfw::TensorRole role = wanfw::TensorRole::weight();
  role.what = what;
  role.hint = "the adapter file holds values no adapter can have: write it again, or leave it out of model.lora.load";
  return role;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// "lora_unet_blocks_0_self_attn_q" -> "blocks.0.self_attn.q"
std::string kohya_layer(const std::string& name) {
  static const std::regex pattern(R"(^blocks_(\d+)_(self_attn|cross_attn|ffn)_(\w+)$)");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return name;
  return fmt::format("blocks.{}.{}.{}", m[1].str(), m[2].str(), m[3].str());
}

/// "blocks.0.attn1.to_q" -> "blocks.0.self_attn.q" (official names pass through).
std::string official_layer(const std::string& name) {
  const std::string official = official_name(name + ".weight", WeightLayout::Diffusers);
  return official.substr(0, official.size() - std::string(".weight").size());
}

}  // namespace

const char* adapter_layout_name(AdapterLayout layout) {
  switch (layout) {
    case AdapterLayout::Wan:
      return "Wan / ComfyUI";
    case AdapterLayout::Diffusers:
      return "diffusers PEFT";
    case AdapterLayout::Kohya:
      return "kohya";
  }
  return "unknown";
}

AdapterFile read_adapter_file(const fs::path& file, const WanConfig& config) {
  const wanfw::SafetensorsFile source = wanfw::SafetensorsFile::open(file);
  const auto fail = [&](const std::string& key, const std::string& problem, const std::string& hint) {
    throw wanfw::FileError(fmt::format("adapter {}: tensor '{}' {}", file.string(), key, problem), hint);
  };
  std::map<std::string, std::array<std::int64_t, 2>> shapes;
  for (const auto& [name, shape] : adaptable_layers(config)) shapes[name] = shape;

  AdapterFile out;
  bool diffusers = false, kohya = false;
  std::map<std::string, std::string> alpha_keys;
  for (const auto& record : source.records()) {
    std::string key = record.name;
    for (const char* prefix : {"model.diffusion_model.", "diffusion_model.", "base_model.model.", "transformer."})
      if (starts_with(key, prefix)) {
        diffusers = diffusers || std::string(prefix) == "transformer.";
        key = key.substr(std::string(prefix).size());
        break;
      }
    std::string part;
    for (const char* suffix : {".lora_A.weight", ".lora_B.weight", ".lora_down.weight", ".lora_up.weight", ".alpha"})
      if (ends_with(key, suffix)) {
        part = suffix;
        key = key.substr(0, key.size() - part.size());
        break;
      }
    if (part.empty())
      fail(record.name, "is not part of a low-rank adapter (lora_A / lora_B / lora_down / lora_up weights, alpha)",
           "wanfw applies low-rank adapters; full weight differences (diff, diff_b) and other extras are not "
           "supported: remove them from the file");
    if (starts_with(key, "lora_unet_")) {
      kohya = true;
      key = kohya_layer(key.substr(std::string("lora_unet_").size()));
    }
    if (key.find("attn1") != std::string::npos || key.find("attn2") != std::string::npos ||
        key.find("ffn.net") != std::string::npos)
      diffusers = true;
    const std::string layer = official_layer(key);
    if (!shapes.count(layer))
      fail(record.name, fmt::format("matches no adaptable layer of the model (read as '{}')", layer),
           fmt::format("the model (preset '{}', {} layers) adapts blocks.N.self_attn|cross_attn.q|k|v|o and "
                       "blocks.N.ffn.0|2; was the adapter made for another model?",
                       config.preset, config.num_layers));
    LayerAdapter& entry = out.layers[layer];
    if (part == ".alpha") {
      const at::Tensor alpha = source.tensor(record.name);
      if (alpha.numel() != 1) fail(record.name, fmt::format("holds {} values, not one alpha", alpha.numel()), "");
      if (!at::isIntegralType(alpha.scalar_type(), false))
        wanfw::check_tensor(alpha, adapter_role("an alpha"), file, record.name);
      entry.alpha = alpha.to(at::kDouble).item<double>();
      check_adapter_alpha(entry.alpha, file, fmt::format("tensor '{}'", record.name));
      alpha_keys[layer] = record.name;
      continue;
    }
    const bool is_a = part == ".lora_A.weight" || part == ".lora_down.weight";
    at::Tensor tensor = wanfw::read_checked(source.tensor(record.name), adapter_role("an adapter matrix"), file,
                                            record.name, at::kFloat);
    if (tensor.dim() != 2)
      fail(record.name, fmt::format("has shape {}; a low-rank matrix has two dimensions", c10::str(tensor.sizes())),
           "");
    (is_a ? entry.A : entry.B) = tensor;
    if (is_a || entry.key.empty()) entry.key = record.name;
  }
  out.layout = kohya ? AdapterLayout::Kohya : diffusers ? AdapterLayout::Diffusers : AdapterLayout::Wan;
  if (out.layers.empty())
    throw wanfw::FileError(fmt::format("adapter {}: holds no adapter tensors", file.string()),
                           "pass a LoRA safetensors file");

  // Alpha without a tensor of its own: the metadata's (PEFT's lora_alpha, kohya's ss_network_alpha),
  // else the rank (scale 1).
  const AdapterMetadata metadata = read_adapter_metadata(source.metadata(), file);
  for (auto& [layer, entry] : out.layers) {
    const std::string& key = entry.key.empty() ? alpha_keys[layer] : entry.key;
    if (!entry.A.defined() || !entry.B.defined())
      fail(key, fmt::format("has no {} matrix beside it", entry.A.defined() ? "lora_B (up)" : "lora_A (down)"),
           "the file is incomplete");
    const auto shape = shapes.at(layer);
    const std::int64_t rank = entry.A.size(0);
    if (rank == 0)
      fail(key, "has rank 0: an adapter without a single direction", "leave the file out of model.lora.load");
    if (metadata.rank && *metadata.rank != rank)
      fail(key,
           fmt::format("has rank {}, but the metadata field {} says {}", rank, metadata.rank_field, *metadata.rank),
           "the file's matrices and metadata disagree: write the adapter again");
    if (entry.A.size(1) != shape[1] || entry.B.size(0) != shape[0] || entry.B.size(1) != rank)
      fail(key,
           fmt::format("and its partner have shapes A {} and B {}, but layer {} needs A [rank, {}] and B [{}, rank]",
                       c10::str(entry.A.sizes()), c10::str(entry.B.sizes()), layer, shape[1], shape[0]),
           "the adapter was made for a model of other dimensions (dim, ffn_dim): choose the matching preset");
    if (!alpha_keys.count(layer)) entry.alpha = metadata.alpha.value_or(static_cast<double>(rank));
  }
  return out;
}

}  // namespace wan
