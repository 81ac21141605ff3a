#include "wan/lora.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"

namespace wan {

namespace {

bool selected_by(const std::vector<std::string>& targets, const std::string& name) {
  return std::any_of(targets.begin(), targets.end(), [&](const std::string& t) { return matches_pattern(name, t); });
}

}  // namespace

std::vector<std::pair<std::string, WanLinearImpl*>> linear_layers(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, WanLinearImpl*>> out;
  for (const auto& item : module.named_modules("", /*include_self=*/false))
    if (auto* layer = item.value()->as<WanLinearImpl>()) out.emplace_back(item.key(), layer);
  return out;
}

bool matches_pattern(const std::string& name, const std::string& pattern) {
  // Iterative glob: on a mismatch, let the last '*' swallow one more character.
  std::size_t n = 0, p = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++n, ++p;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> target_layers(const WanConfig& config, const std::vector<std::string>& targets,
                                       std::vector<std::string>* unmatched) {
  std::vector<std::string> selected;
  std::vector<bool> used(targets.size(), false);
  for (const auto& [name, shape] : adaptable_layers(config)) {
    bool take = false;
    for (std::size_t i = 0; i < targets.size(); ++i)
      if (matches_pattern(name, targets[i])) take = used[i] = true;
    if (take) selected.push_back(name);
  }
  if (unmatched != nullptr)
    for (std::size_t i = 0; i < targets.size(); ++i)
      if (!used[i]) unmatched->push_back(targets[i]);
  return selected;
}

std::int64_t adapter_parameter_count(const WanConfig& config, const LoraSettings& settings) {
  if (!settings.enabled()) return 0;
  std::int64_t count = 0;
  for (const auto& [name, shape] : adaptable_layers(config))
    if (selected_by(settings.targets, name)) count += settings.rank * (shape[0] + shape[1]);
  return count;
}

std::string adapter_summary(const WanConfig& config, const LoraSettings& settings, int models) {
  if (!settings.enabled()) return "";
  const double weights = static_cast<double>(config.parameter_count()) * models;
  const double adapters = static_cast<double>(adapter_parameter_count(config, settings)) * models;
  const std::size_t layers = target_layers(config, settings.targets).size();
  return fmt::format(
      "LoRA rank {} (alpha {:g}) on {} layers{}: {} trainable parameters, {:.3f}% of the weights; adapter file {:.1f} "
      "MiB{} (float32)\n",
      settings.rank, settings.alpha, layers, models == 2 ? " of each expert" : "",
      with_thousands(static_cast<std::int64_t>(adapters)), 100.0 * adapters / weights,
      adapters / models * 4 / (1024.0 * 1024.0), models == 2 ? " per expert" : "");
}

void attach_adapters(WanDiTImpl& dit, const LoraSettings& settings) {
  for (auto& p : dit.parameters()) p.set_requires_grad(false);
  dit.lora_dropout = std::make_shared<LoraDropoutStreams>();
  const std::vector<std::string> selected = target_layers(dit.config(), settings.targets);
  const LoraShape shape{settings.rank, settings.alpha, settings.dropout};
  for (const auto& [name, layer] : linear_layers(dit))
    if (std::find(selected.begin(), selected.end(), name) != selected.end())
      layer->attach_lora(shape, torch::kFloat32, name, dit.lora_dropout);
}

void attach_second_adapters(WanDiTImpl& dit, const LoraSettings& settings) {
  if (!dit.adapter_selection) dit.adapter_selection = std::make_shared<AdapterSelection>();
  const std::vector<std::string> selected = target_layers(dit.config(), settings.targets);
  const LoraShape shape{settings.rank, settings.alpha, 0.0};
  for (const auto& [name, layer] : linear_layers(dit))
    if (std::find(selected.begin(), selected.end(), name) != selected.end())
      layer->attach_second_lora(shape, torch::kFloat32, dit.adapter_selection);
}

void refresh_adapters(WanDiTImpl& dit) {
  if (adapter_parameters(dit).empty() && second_adapter_parameters(dit).empty()) return;  // trained whole
  for (auto& p : dit.parameters()) p.set_requires_grad(false);
  dit.lora_dropout = std::make_shared<LoraDropoutStreams>();
  if (dit.adapter_selection) dit.adapter_selection = std::make_shared<AdapterSelection>(*dit.adapter_selection);
  for (const auto& [name, layer] : linear_layers(dit)) {
    if (dit.adapter_selection) layer->set_adapter_selection(dit.adapter_selection);
    if (layer->has_second_lora()) {
      layer->critic_lora_A->weight.set_requires_grad(true);
      layer->critic_lora_B->weight.set_requires_grad(true);
    }
    if (!layer->has_lora()) continue;
    layer->set_dropout_streams(dit.lora_dropout);
    layer->lora_A->weight.set_requires_grad(true);
    layer->lora_B->weight.set_requires_grad(true);
  }
}

void remove_second_adapters(WanDiTImpl& dit) {
  for (const auto& [name, layer] : linear_layers(dit))
    if (layer->has_second_lora()) layer->attach_second_lora({}, torch::kFloat32, dit.adapter_selection);
}

std::vector<std::pair<std::string, at::Tensor>> second_adapter_parameters(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, layer] : linear_layers(module)) {
    if (!layer->has_second_lora()) continue;
    out.emplace_back(name + ".critic_lora_A.weight", layer->critic_lora_A->weight);
    out.emplace_back(name + ".critic_lora_B.weight", layer->critic_lora_B->weight);
  }
  return out;
}

AdapterScope::AdapterScope(WanDiTImpl& dit, AdapterSelection selection) { select(dit, selection); }

AdapterScope::AdapterScope(const std::vector<WanDiT>& dits, AdapterSelection selection) {
  for (const WanDiT& dit : dits) select(*dit.ptr(), selection);
}

void AdapterScope::select(WanDiTImpl& dit, AdapterSelection selection) {
  if (!dit.adapter_selection) return;
  before_.emplace_back(&dit, *dit.adapter_selection);
  *dit.adapter_selection = selection;
}

AdapterScope::~AdapterScope() {
  for (auto& [dit, before] : before_) *dit->adapter_selection = before;
}

std::vector<std::pair<std::string, at::Tensor>> adapter_parameters(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, layer] : linear_layers(module)) {
    if (!layer->has_lora()) continue;
    out.emplace_back(name + ".lora_A.weight", layer->lora_A->weight);
    out.emplace_back(name + ".lora_B.weight", layer->lora_B->weight);
  }
  return out;
}

wanfw::ParameterGroup adapter_group(const torch::nn::Module& module, const LoraSettings& settings) {
  wanfw::ParameterGroup group;
  group.name = "lora";
  group.parameters = adapter_parameters(module);
  group.lr_scale = settings.lr_scale;
  group.weight_decay = settings.weight_decay;
  return group;
}

void merge_adapters(WanDiTImpl& dit) {
  for (const auto& [name, layer] : linear_layers(dit)) layer->merge_lora();
}

DropoutSamplesScope::DropoutSamplesScope(std::vector<WanDiT> dits, const wanfw::Batch& batch) : dits_(std::move(dits)) {
  for (auto& dit : dits_)
    if (dit->lora_dropout) dit->lora_dropout->set(LoraDropoutStreams::samples_of(batch));
}

DropoutSamplesScope::~DropoutSamplesScope() {
  for (auto& dit : dits_)
    if (dit->lora_dropout) dit->lora_dropout->set(std::nullopt);
}

}  // namespace wan
