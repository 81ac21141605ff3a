#include "wanfw/model.hpp"

#include <algorithm>

#include "wanfw/error.hpp"

namespace wanfw {

std::vector<ParameterGroup> Model::parameter_groups() {
  ParameterGroup group;
  group.name = "default";
  for (const auto& item : module()->named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) group.parameters.emplace_back(item.key(), item.value());
  return {group};
}

std::vector<std::pair<std::string, at::Tensor>> Model::trainable_parameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& group : parameter_groups())
    for (auto& item : group.parameters) out.push_back(std::move(item));
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Model::phase_parameters(int phase) {
  const std::vector<TrainingPhase> declared = phases();
  if (declared.empty()) return trainable_parameters();
  const TrainingPhase& wanted = declared.at(static_cast<std::size_t>(phase));
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& group : parameter_groups())
    if (std::find(wanted.groups.begin(), wanted.groups.end(), group.name) != wanted.groups.end())
      for (auto& item : group.parameters) out.push_back(std::move(item));
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Model::checkpoint_tensors() {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : module()->named_parameters(true)) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : module()->named_buffers(true)) tensors.emplace_back(item.key(), item.value());
  return tensors;
}

std::map<std::string, at::Tensor> Model::predict(const std::map<std::string, at::Tensor>&) {
  throw Error("this model plugin does not support `wanfw predict`", "use a model plugin that implements predict()");
}

std::map<std::string, at::Tensor> Model::validation_step(const Batch& batch) {
  StepOutput out = training_step(batch);
  out.metrics["loss"] = out.loss;
  return out.metrics;
}

std::map<std::string, at::Tensor> Model::sample(const std::map<std::string, at::Tensor>&, std::uint64_t) {
  throw Error("this model plugin does not support `wanfw sample`", "use a model plugin that implements sample()");
}

std::map<std::string, at::Tensor> Model::sample_streamed(const std::map<std::string, at::Tensor>& inputs,
                                                         std::uint64_t seed,
                                                         const std::function<void(const at::Tensor&)>& made) {
  std::map<std::string, at::Tensor> out = sample(inputs, seed);
  const auto latents = out.find("latents");
  if (made && latents != out.end()) made(latents->second);
  return out;
}

void Model::export_weights(const std::filesystem::path&, const ExportSettings&) {
  throw Error("this model plugin does not support `wanfw export`",
              "use the checkpoint's model.safetensors, which holds every parameter under its module name");
}

at::Tensor Model::preview(const Batch&, std::uint64_t) { return {}; }

std::unique_ptr<Model> Model::replicate(const c10::Device&) {
  throw PluginError("the model plugin was asked for a replica, but it implements no Model::replicate",
                    "a model that overrides replicate declares ModelCapabilities::replicates; use ddp, which needs no "
                    "replicas");
}

std::vector<int> Model::route(const Batch& keys) const { return std::vector<int>(keys.sample_ids.size(), 0); }

}  // namespace wanfw
