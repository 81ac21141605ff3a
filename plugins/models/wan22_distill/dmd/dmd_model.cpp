// The DMD model's plumbing: its modules, groups and phases, checkpoints, replicas, sampling and
// export. The objective is in dmd_objective.cpp.
#include "dmd/dmd_model.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "distill_inputs.hpp"
#include "replicas.hpp"
#include "wan/dit_export.hpp"
#include "wan/lora.hpp"
#include "wanfw/error.hpp"

namespace wan_distill {

namespace {

std::vector<std::pair<std::string, at::Tensor>> prefixed(std::vector<std::pair<std::string, at::Tensor>> named,
                                                         const std::string& prefix) {
  for (auto& item : named) item.first = prefix + item.first;
  return named;
}

/// Every parameter of `dit` that requires grad, named below `prefix`.
std::vector<std::pair<std::string, at::Tensor>> trained_of(const wan::WanDiT& dit, const std::string& prefix) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : dit->named_parameters(true))
    if (item.value().requires_grad()) out.emplace_back(prefix + item.key(), item.value());
  return out;
}

}  // namespace

DmdModulesImpl::DmdModulesImpl(wan::WanDiT generator_dit, wan::WanDiT critic_dit) {
  generator = register_module("generator", std::move(generator_dit));
  if (critic_dit) critic = register_module("critic", std::move(critic_dit));
}

DmdModel::DmdModel(wan::WanDiT generator, wan::WanDiT critic, std::shared_ptr<FrozenTeacher> teacher,
                   DistillSettings common, DmdSettings dmd)
    : modules_(std::move(generator), std::move(critic)),
      teacher_(std::move(teacher)),
      common_(std::move(common)),
      dmd_(std::move(dmd)) {}

DmdModel::DmdModel(const DmdModel& other, const c10::Device& device)
    : modules_(replica_dit(other.modules_->generator, device),
               other.modules_->critic ? replica_dit(other.modules_->critic, device) : wan::WanDiT(nullptr)),
      teacher_(replica_teacher(other.teacher_, other.device(), device)),
      common_(other.common_),
      dmd_(other.dmd_) {}

std::unique_ptr<wanfw::Model> DmdModel::replicate(const c10::Device& device) {
  return std::make_unique<DmdModel>(*this, device);
}

torch::Device DmdModel::device() const { return modules_->generator->parameters().front().device(); }

std::vector<wanfw::ParameterGroup> DmdModel::parameter_groups() {
  wanfw::ParameterGroup generator, critic;
  generator.name = "generator";
  if (common_.lora.enabled()) {
    generator.parameters = prefixed(wan::adapter_parameters(*modules_->generator), "generator.");
    generator.lr_scale = common_.lora.lr_scale;
    generator.weight_decay = common_.lora.weight_decay;
  } else {
    generator.parameters = trained_of(modules_->generator, "generator.");
  }
  critic.name = "critic";
  critic.lr_scale = dmd_.critic_lr_scale;
  if (shared())
    critic.parameters = prefixed(wan::second_adapter_parameters(*modules_->generator), "generator.");
  else if (dmd_.critic_lora.enabled())
    critic.parameters = prefixed(wan::adapter_parameters(*modules_->critic), "critic.");
  else
    critic.parameters = trained_of(modules_->critic, "critic.");
  if (dmd_.critic_lora.enabled()) critic.weight_decay = dmd_.critic_lora.weight_decay;
  return {generator, critic};
}

std::vector<wanfw::TrainingPhase> DmdModel::phases() {
  std::vector<wanfw::TrainingPhase> out;
  for (const auto& [phase, name] : kPhases)  // each phase trains its own group, named alike
    out.push_back({name, {name}, phase == Phase::Critic ? dmd_.critic_updates : 1});
  return out;
}

void DmdModel::set_phase(int phase) { phase_ = kPhases.at(static_cast<std::size_t>(phase)).first; }

std::vector<std::pair<std::string, at::Tensor>> DmdModel::checkpoint_tensors() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const auto add = [&](const wan::WanDiT& dit, const std::string& prefix, bool adapters) {
    if (adapters) {
      for (auto& item : prefixed(wan::adapter_parameters(*dit), prefix)) out.push_back(std::move(item));
      for (auto& item : prefixed(wan::second_adapter_parameters(*dit), prefix)) out.push_back(std::move(item));
      return;
    }
    for (const auto& item : dit->named_parameters(true)) out.emplace_back(prefix + item.key(), item.value());
    for (const auto& item : dit->named_buffers(true)) out.emplace_back(prefix + item.key(), item.value());
  };
  add(modules_->generator, "generator.", common_.lora.enabled());
  if (!shared()) add(modules_->critic, "critic.", dmd_.critic_lora.enabled());
  return out;
}

std::vector<wanfw::Unit> DmdModel::units() {
  std::vector<wanfw::Unit> units = modules_->generator->units("generator.");
  if (!shared())
    for (auto& unit : modules_->critic->units("critic.")) units.push_back(std::move(unit));
  return units;
}

void DmdModel::set_unit_runner(wanfw::UnitRunner* runner) {
  modules_->generator->set_unit_runner(runner, 0);
  if (!shared())
    modules_->critic->set_unit_runner(runner, static_cast<std::size_t>(modules_->generator->config().num_layers));
}

std::vector<wanfw::FieldSpec> DmdModel::batch_fields() const {
  // Data-free: G's own steps make its inputs.
  const auto& c = modules_->generator->config();
  return distill_fields(c, common_.task, teacher_ ? teacher_->config().text_len : c.text_len,
                        common_.inputs == Inputs::Data);
}

std::map<std::string, at::Tensor> DmdModel::sample(const std::map<std::string, at::Tensor>& inputs,
                                                   std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  modules_->eval();
  wan::WanDiT& g = modules_->generator;
  const wan::SampleInputs given =
      wan::sample_inputs(inputs, g->config(), common_.task, common_.sampler.size, seed, device());
  const auto velocity = [&](const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                            const torch::Tensor&) {
    const wan::AdapterScope generator_only(*g, {true, false});
    return g->forward(x, t, context, given.y);
  };
  return wan::euler_sample(velocity, given, g->config(), common_.task, dmd_.generator_steps, dmd_.generator_shift, 1.0,
                           "renoise", seed);
}

at::Tensor DmdModel::preview(const wanfw::Batch& batch, std::uint64_t seed) {
  return sample(preview_conditioning(batch, common_.task, noise_of(batch)), seed).at("latents");
}

void DmdModel::export_weights(const std::filesystem::path& folder, const wanfw::ExportSettings& settings) {
  if (shared()) wan::remove_second_adapters(*modules_->generator);  // the critic stays behind
  wan::export_dit(*modules_->generator, common_.task, folder, settings);
}

}  // namespace wan_distill
