#include "wan/wan_weights.hpp"

#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "wan/fp8_files.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"
#include "wanfw/log.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/io/tensor_check.hpp"

namespace fs = std::filesystem;

namespace wan {

namespace {

fs::path resolve(const fs::path& path, const std::string& subfolder) {
  if (!fs::exists(path))
    throw wanfw::FileError(fmt::format("Wan weights: {} does not exist", path.string()),
                           "set model.weights to a .safetensors file, an index json or a checkpoint folder");
  if (!subfolder.empty() && fs::is_directory(path / subfolder)) return path / subfolder;
  if (fs::is_directory(path) && !fs::exists(path / "diffusion_pytorch_model.safetensors") &&
      !fs::exists(path / "diffusion_pytorch_model.safetensors.index.json") && fs::is_directory(path / "transformer"))
    return path / "transformer";  // a diffusers pipeline folder
  return path;
}

std::string listed(const std::vector<std::string>& items) {
  constexpr std::size_t kShown = 8;
  std::vector<std::string> shown(items.begin(), items.begin() + std::min(items.size(), kShown));
  std::string text = fmt::format("{}", fmt::join(shown, ", "));
  if (items.size() > kShown) text += fmt::format(" and {} more", items.size() - kShown);
  return text;
}

}  // namespace

namespace {

/// The tensors an fp8 file stores beside a weight (its scales, its format) and the file-wide
/// marker: read with the weight (wan::read_fp8_weight), not parameters of their own.
bool fp8_companion(const std::string& key) {
  for (const char* suffix : {".scale_weight", ".weight_scale", ".comfy_quant", ".scale_input", ".input_scale"})
    if (key.ends_with(suffix)) return true;
  return key == "scaled_fp8";
}

WeightLayout check_opened(const WanConfig& config, const wanfw::SafetensorsCheckpoint& checkpoint, const fs::path& path,
                          std::map<std::string, std::string>* key_of) {
  const std::vector<std::string> keys = checkpoint.names();
  const bool diffusers = std::any_of(keys.begin(), keys.end(), [](const std::string& k) {
    return k.rfind("condition_embedder.", 0) == 0 || k.find(".attn1.") != std::string::npos;
  });
  const WeightLayout layout = diffusers ? WeightLayout::Diffusers : WeightLayout::Official;

  std::map<std::string, std::string> source_of;  // official name -> checkpoint key
  for (const auto& key : keys) {
    if (fp8_companion(key)) continue;
    std::string name = official_name(key, layout);
    if (name.rfind("model.diffusion_model.", 0) == 0) name = name.substr(22);  // single-file repackages
    source_of[name] = key;
  }
  std::vector<std::string> unexpected, missing, mismatched;
  std::set<std::string> expected;
  for (const ParameterSpec& parameter : config.parameters()) {
    const std::string& name = parameter.name;
    const std::vector<std::int64_t>& shape = parameter.shape;
    expected.insert(name);
    auto it = source_of.find(name);
    if (it == source_of.end()) {
      missing.push_back(name);
      continue;
    }
    const auto& record = checkpoint.record(it->second);
    if (record.shape != shape)
      mismatched.push_back(fmt::format("{} (file {}, model {})", name, c10::str(c10::IntArrayRef(record.shape)),
                                       c10::str(c10::IntArrayRef(shape))));
  }
  for (const auto& [name, key] : source_of)
    if (!expected.count(name)) unexpected.push_back(key);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string problem = fmt::format("Wan weights at {} ({} layout) do not fit the model (preset '{}', dim {}, {} "
                                      "layers, in {}, out {}):",
                                      path.string(), diffusers ? "diffusers" : "official", config.preset, config.dim,
                                      config.num_layers, config.in_dim, config.out_dim);
    if (!missing.empty()) problem += fmt::format("\n  missing ({}): {}", missing.size(), listed(missing));
    if (!unexpected.empty()) problem += fmt::format("\n  unexpected ({}): {}", unexpected.size(), listed(unexpected));
    if (!mismatched.empty()) problem += fmt::format("\n  shape mismatch ({}): {}", mismatched.size(), listed(mismatched));
    const bool base_model = unexpected.empty() && mismatched.empty() &&
                            std::all_of(missing.begin(), missing.end(), [](const std::string& name) {
                              return name.rfind("vace_", 0) == 0;
                            });
    throw wanfw::FileError(problem, base_model ? "the checkpoint is a base model without the VACE branch: load a VACE "
                                                 "checkpoint, or set model.vace_branch: new to start the branch there"
                                               : "choose the preset (or dims) the checkpoint was trained with");
  }
  if (key_of != nullptr) *key_of = std::move(source_of);
  return layout;
}

}  // namespace

namespace {

/// The parameters a checkpoint must hold: `config`'s, less a new VACE branch.
WanConfig held_by_checkpoint(WanConfig config, bool new_branch) {
  if (new_branch) config.vace_layers.clear();
  return config;
}

}  // namespace

WeightLayout check_wan_weights(const WanConfig& config, const fs::path& given, const std::string& subfolder,
                               std::map<std::string, std::string>* key_of, bool new_branch) {
  const fs::path path = resolve(given, subfolder);
  return check_opened(held_by_checkpoint(config, new_branch), wanfw::SafetensorsCheckpoint::open(path), path, key_of);
}

WeightLayout load_wan_weights(WanDiTImpl& model, const fs::path& given, const std::string& subfolder,
                              bool new_branch) {
  const fs::path path = resolve(given, subfolder);
  const wanfw::SafetensorsCheckpoint checkpoint = wanfw::SafetensorsCheckpoint::open(path);
  std::map<std::string, std::string> key_of;
  const WeightLayout layout = check_opened(held_by_checkpoint(model.config(), new_branch), checkpoint, path, &key_of);
  std::map<std::string, WanLinearImpl*> fp8_layers;  // "<layer>.weight" -> the layer
  for (const auto& item : model.named_modules())
    if (auto* layer = item.value()->as<WanLinearImpl>(); layer != nullptr && layer->fp8_base())
      fp8_layers[item.key() + ".weight"] = layer;
  torch::NoGradGuard no_grad;
  const wanfw::TensorRole role = wanfw::TensorRole::weight();
  std::int64_t as_stored = 0, fp8_bytes = 0;
  for (auto& p : model.named_parameters(/*recurse=*/true)) {
    if (p.key().ends_with(".weight_scale")) continue;  // set with its weight
    if (new_branch && p.key().rfind("vace_", 0) == 0) continue;  // the new branch keeps its initial values
    const std::string& key = key_of.at(p.key());
    const fs::path file = checkpoint.file_of(key);
    // An fp8 file's weight is read as stored (never quantized again), a wider one quantized here,
    // one tensor at a time; an fp8 weight for a layer kept wider is dequantized.
    std::optional<Fp8Weight> stored = read_fp8_weight(checkpoint, key);
    if (stored) wanfw::check_tensor(dequantize_fp8(*stored, torch::kFloat32), role, file, key);
    if (auto layer = fp8_layers.find(p.key()); layer != fp8_layers.end()) {
      as_stored += stored ? 1 : 0;
      if (!stored) {
        const at::Tensor source = checkpoint.tensor(key);
        wanfw::check_tensor(source, role, file, key, p.value().sizes().vec());
        stored = quantize_fp8(source.to(p.value().device()));
      }
      fp8_bytes += static_cast<std::int64_t>(stored->values.nbytes() + stored->scales.nbytes());
      layer->second->set_fp8_base(std::move(*stored));
    } else if (stored) {
      p.value().copy_(dequantize_fp8(*stored, torch::kFloat32));
    } else {
      wanfw::copy_checked(p.value(), checkpoint.tensor(key), role, file, key);
    }
  }
  if (!fp8_layers.empty())
    wanfw::log::info(fmt::format("fp8 base: {} block Linear weights in {:.1f} MiB with their scales ({} read as "
                                 "stored in fp8, {} quantized while loading)",
                                 fp8_layers.size(), static_cast<double>(fp8_bytes) / (1 << 20), as_stored,
                                 fp8_layers.size() - static_cast<std::size_t>(as_stored)));
  return layout;
}

void save_wan_weights(const WanDiTImpl& model, const fs::path& folder, const std::string& model_type,
                      std::int64_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw wanfw::FileError(fmt::format("{}: cannot create the folder: {}", folder.string(), ec.message()));
  // Shards in parameter order, each up to max_shard_bytes (a larger tensor gets one of its own).
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  std::int64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    const at::Tensor tensor = p.value().detach().cpu().contiguous();
    const std::int64_t bytes = static_cast<std::int64_t>(tensor.nbytes());
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(p.key(), tensor);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"written_by", "wanfw"}};
  if (shards.size() == 1) {
    wanfw::write_safetensors(folder / "diffusion_pytorch_model.safetensors", shards.front(), metadata);
  } else {
    std::string weight_map;
    for (std::size_t i = 0; i < shards.size(); ++i) {
      const std::string file = fmt::format("diffusion_pytorch_model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
      wanfw::write_safetensors(folder / file, shards[i], metadata);
      for (const auto& [name, tensor] : shards[i])
        weight_map += fmt::format("{}    \"{}\": \"{}\"", weight_map.empty() ? "" : ",\n", name, file);
    }
    wanfw::write_file_atomically(
        folder / "diffusion_pytorch_model.safetensors.index.json",
        fmt::format("{{\n  \"metadata\": {{\"total_size\": {}}},\n  \"weight_map\": {{\n{}\n  }}\n}}\n", total_bytes,
                    weight_map));
  }
  const WanConfig& c = model.config();
  // A VACE model's config is the official VaceWanModel's: model_type "vace" and the branch's fields.
  const std::string vace = c.has_vace() ? fmt::format(",\n  \"vace_layers\": [{}],\n  \"vace_in_dim\": {}",
                                                      fmt::join(c.vace_layers, ", "), c.vace_in_dim)
                                        : "";
  wanfw::write_file_atomically(
      folder / "config.json",
      fmt::format("{{\n  \"_class_name\": \"{}\",\n  \"model_type\": \"{}\",\n  \"patch_size\": [{}, {}, {}],\n"
                  "  \"text_len\": {},\n  \"in_dim\": {},\n  \"dim\": {},\n  \"ffn_dim\": {},\n  \"freq_dim\": {},\n"
                  "  \"text_dim\": {},\n  \"out_dim\": {},\n  \"num_heads\": {},\n  \"num_layers\": {},\n"
                  "  \"window_size\": [-1, -1],\n  \"qk_norm\": true,\n  \"cross_attn_norm\": true,\n  \"eps\": {}{}\n}}\n",
                  c.has_vace() ? "VaceWanModel" : "WanModel", c.has_vace() ? "vace" : model_type, c.patch[0], c.patch[1], c.patch[2], c.text_len, c.in_dim, c.dim, c.ffn_dim, c.freq_dim, c.text_dim,
                  c.out_dim, c.num_heads, c.num_layers, c.eps, vace));
}

}  // namespace wan
