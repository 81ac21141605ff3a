#include "wan/lora_files.hpp"

#include <regex>
#include <set>

#include <fmt/format.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "wanfw/error.hpp"
#include "wanfw/log.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace wan {

namespace {

constexpr const char* kWanFile = "wan_lora.safetensors";
constexpr const char* kDiffusersFile = "pytorch_lora_weights.safetensors";
constexpr const char* kMetadataKey = "lora_adapter_metadata";

/// "blocks.0.self_attn.q" -> "blocks.0.attn1.to_q"
std::string diffusers_layer(const std::string& name) {
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^((?:vace_)?blocks\.\d+)\.self_attn\.o$)"), "$1.attn1.to_out.0"},
      {std::regex(R"(^((?:vace_)?blocks\.\d+)\.self_attn\.([qkv])$)"), "$1.attn1.to_$2"},
      {std::regex(R"(^((?:vace_)?blocks\.\d+)\.cross_attn\.o$)"), "$1.attn2.to_out.0"},
      {std::regex(R"(^((?:vace_)?blocks\.\d+)\.cross_attn\.([qkv])$)"), "$1.attn2.to_$2"},
      {std::regex(R"(^((?:vace_)?blocks\.\d+)\.ffn\.0$)"), "$1.ffn.net.0.proj"},
      {std::regex(R"(^((?:vace_)?blocks\.\d+)\.ffn\.2$)"), "$1.ffn.net.2"},
  };
  for (const auto& [pattern, replacement] : rules)
    if (std::regex_match(name, pattern)) return std::regex_replace(name, pattern, replacement);
  return name;
}

}  // namespace

AdapterLayout apply_adapter_file(WanDiTImpl& dit, const AdapterLoad& load) {
  const AdapterFile adapter = read_adapter_file(load.file, dit.config());
  const auto listed = linear_layers(dit);
  const std::map<std::string, WanLinearImpl*> layers(listed.begin(), listed.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, entry] : adapter.layers) {
    WanLinearImpl* layer = layers.at(name);
    const std::int64_t rank = entry.A.size(0);
    const double file_scale = load.scale * entry.alpha / static_cast<double>(rank);
    if (!load.train) {
      layer->add_to_base(file_scale * torch::matmul(entry.B, entry.A));
      continue;
    }
    if (!layer->has_lora())
      throw wanfw::FileError(fmt::format("adapter {}: tensor '{}' adapts {}, which model.lora.targets does not select",
                                         load.file.string(), entry.key, name),
                             fmt::format("add a pattern matching {} to model.lora.targets, or merge this adapter "
                                         "(train: false) {}", name, load.where));
    if (layer->lora().rank != rank)
      throw wanfw::FileError(fmt::format("adapter {}: tensor '{}' has rank {}, but model.lora.rank is {}",
                                         load.file.string(), entry.key, rank, layer->lora().rank),
                             fmt::format("set model.lora.rank: {} to train this adapter further, or merge it "
                                         "(train: false) {}", rank, load.where));
    const double own_scale = layer->lora().alpha / static_cast<double>(rank);
    layer->lora_A->weight.copy_(entry.A);
    layer->lora_B->weight.copy_(entry.B * (file_scale / own_scale));
  }
  return adapter.layout;
}

void apply_lora(WanDiTImpl& dit, const LoraSettings& settings, const std::string& expert) {
  const auto applies = [&](const AdapterLoad& load) { return load.expert.empty() || load.expert == expert; };
  const std::string of = expert.empty() ? "the DiT" : "the " + expert + " expert";
  for (const auto& load : settings.load)
    if (!load.train && applies(load)) {
      const AdapterLayout layout = apply_adapter_file(dit, load);
      wanfw::log::info(fmt::format("merged adapter {} ({} layout, scale {:g}) into {}", load.file.string(),
                                   adapter_layout_name(layout), load.scale, of));
    }
  if (!settings.enabled()) return;
  attach_adapters(dit, settings);
  const auto adapters = adapter_parameters(dit);
  std::int64_t count = 0;
  for (const auto& [name, tensor] : adapters) count += tensor.numel();
  wanfw::log::info(fmt::format(
      "adapters of rank {} (alpha {:g}) on {} layers of {}: {} trainable parameters, {:.3f}% of its weights "
      "(frozen)",
      settings.rank, settings.alpha, adapters.size() / 2, of, with_thousands(count),
      100.0 * static_cast<double>(count) / static_cast<double>(dit.config().parameter_count())));
  for (const auto& load : settings.load)
    if (load.train && applies(load)) {
      const AdapterLayout layout = apply_adapter_file(dit, load);
      wanfw::log::info(fmt::format("the adapters of {} start from {} ({} layout, scale {:g})", of, load.file.string(),
                                   adapter_layout_name(layout), load.scale));
    }
}

void write_adapter_files(const WanDiTImpl& dit, const fs::path& folder) {
  std::vector<std::pair<std::string, at::Tensor>> wan, diffusers;
  std::int64_t rank = 0;
  double alpha = 0;
  std::set<std::string> targets;
  for (const auto& [name, layer] : linear_layers(dit)) {
    if (!layer->has_lora()) continue;
    const at::Tensor a = layer->lora_A->weight.detach().cpu().contiguous();
    const at::Tensor b = layer->lora_B->weight.detach().cpu().contiguous();
    rank = layer->lora().rank;
    alpha = layer->lora().alpha;
    wan.emplace_back("diffusion_model." + name + ".lora_A.weight", a);
    wan.emplace_back("diffusion_model." + name + ".lora_B.weight", b);
    wan.emplace_back("diffusion_model." + name + ".alpha", torch::tensor(static_cast<float>(alpha)));
    const std::string target = diffusers_layer(name);
    diffusers.emplace_back("transformer." + target + ".lora_A.weight", a);
    // alpha / rank folded into B, so that every loader (one that reads the metadata's lora_alpha,
    // or one that takes alpha = rank) applies the same update.
    diffusers.emplace_back("transformer." + target + ".lora_B.weight", b * (alpha / static_cast<double>(rank)));
    targets.insert(target.substr(target.find('.', std::string("blocks.").size()) + 1));
  }
  if (wan.empty()) throw wanfw::Error("the model carries no adapters to write", "set model.lora.rank above 0");
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw wanfw::FileError(fmt::format("{}: cannot create the folder: {}", folder.string(), ec.message()));
  wanfw::write_safetensors(folder / kWanFile, wan, {{"format", "pt"}, {"written_by", "wanfw"}});
  const nlohmann::json metadata = {{"r", rank},
                                   {"lora_alpha", rank},
                                   {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
                                   {"init_lora_weights", true},
                                   {"use_dora", false},
                                   {"lora_bias", false}};
  wanfw::write_safetensors(folder / kDiffusersFile, diffusers,
                           {{"format", "pt"}, {"written_by", "wanfw"}, {kMetadataKey, metadata.dump()}});
}

}  // namespace wan
