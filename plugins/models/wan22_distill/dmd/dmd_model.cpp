// The DMD model's plumbing: its modules, groups and phases, checkpoints, replicas, sampling and
// export. The objective is in dmd_objective.cpp.
#include "dmd/dmd_model.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "distill_inputs.hpp"
#include "networks/replicas.hpp"
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

/// Every parameter of `module` that requires grad, named below `prefix`.
std::vector<std::pair<std::string, at::Tensor>> trained_of(const torch::nn::Module& module, const std::string& prefix) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : module.named_parameters(true))
    if (item.value().requires_grad()) out.emplace_back(prefix + item.key(), item.value());
  return out;
}

}  // namespace

DmdModulesImpl::DmdModulesImpl(const std::shared_ptr<torch::nn::Module>& generator_module, wan::WanDiT critic_dit) {
  register_module("generator", generator_module);
  if (critic_dit) critic = register_module("critic", std::move(critic_dit));
}

DmdModel::DmdModel(wan::WanDenoiser generator, wan::WanDiT critic, std::shared_ptr<FrozenTeacher> teacher,
                   DistillSettings common, DmdSettings dmd)
    : generator_(std::move(generator)),
      modules_(generator_.module(), std::move(critic)),
      teacher_(std::move(teacher)),
      common_(std::move(common)),
      dmd_(std::move(dmd)) {}

DmdModel::DmdModel(const DmdModel& other, const c10::Device& device)
    : generator_(other.generator_, device),
      modules_(generator_.module(),
               other.modules_->critic ? replica_dit(other.modules_->critic, device) : wan::WanDiT(nullptr)),
      teacher_(replica_teacher(other.teacher_, other.device(), device)),
      common_(other.common_),
      dmd_(other.dmd_) {}

std::unique_ptr<wanfw::Model> DmdModel::replicate(const c10::Device& device) {
  return std::make_unique<DmdModel>(*this, device);
}

torch::Device DmdModel::device() const { return generator_.module()->parameters().front().device(); }

std::vector<wanfw::ParameterGroup> DmdModel::parameter_groups() {
  wanfw::ParameterGroup generator, critic;
  generator.name = "generator";
  if (common_.lora.enabled()) {
    generator.parameters = prefixed(wan::adapter_parameters(*generator_.module()), "generator.");
    generator.lr_scale = common_.lora.lr_scale;
    generator.weight_decay = common_.lora.weight_decay;
  } else {
    generator.parameters = trained_of(*generator_.module(), "generator.");
  }
  critic.name = "critic";
  critic.lr_scale = dmd_.critic_lr_scale;
  if (shared())
    critic.parameters = prefixed(wan::second_adapter_parameters(*generator_.module()), "generator.");
  else if (dmd_.critic_lora.enabled())
    critic.parameters = prefixed(wan::adapter_parameters(*modules_->critic), "critic.");
  else
    critic.parameters = trained_of(*modules_->critic, "critic.");
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
  const auto add = [&](const torch::nn::Module& module, const std::string& prefix, bool adapters) {
    if (adapters) {
      for (auto& item : prefixed(wan::adapter_parameters(module), prefix)) out.push_back(std::move(item));
      for (auto& item : prefixed(wan::second_adapter_parameters(module), prefix)) out.push_back(std::move(item));
      return;
    }
    for (const auto& item : module.named_parameters(true)) out.emplace_back(prefix + item.key(), item.value());
    for (const auto& item : module.named_buffers(true)) out.emplace_back(prefix + item.key(), item.value());
  };
  add(*generator_.module(), "generator.", common_.lora.enabled());
  if (!shared()) add(*modules_->critic, "critic.", dmd_.critic_lora.enabled());
  return out;
}

std::vector<wanfw::Unit> DmdModel::units() {
  std::vector<wanfw::Unit> units = generator_.units("generator.");
  if (!shared())
    for (auto& unit : modules_->critic->units("critic.")) units.push_back(std::move(unit));
  return units;
}

void DmdModel::set_unit_runner(wanfw::UnitRunner* runner) {
  generator_.set_unit_runner(runner);
  if (!shared()) modules_->critic->set_unit_runner(runner, generator_.block_count());
}

bool DmdModel::set_sequence_group(const wanfw::DistributedSession* group) {
  if (group != nullptr && common_.lora.enabled() && common_.lora.dropout > 0)
    throw wanfw::Error("LoRA dropout draws its masks over each sample's whole token sequence, which sequence "
                       "parallelism splits across ranks",
                       "set model.lora.dropout: 0, or strategy.sequence_parallel: 1");
  if (group != nullptr && teacher_ && teacher_->placement().device != device())
    throw wanfw::Error(fmt::format("the teacher computes on {}, the generator on {}: under sequence parallelism every "
                                   "network splits its tokens over the group's devices",
                                   teacher_->placement().device.str(), device().str()),
                       "leave model.teacher_device empty (the teacher beside the generator), or set "
                       "strategy.sequence_parallel: 1");
  generator_.set_sequence_group(group);
  if (!shared()) modules_->critic->set_sequence_group(group);
  if (teacher_) teacher_->set_sequence_group(group);
  return true;
}

std::vector<wanfw::FieldSpec> DmdModel::batch_fields() const {
  // Data-free: G's own steps make its inputs.
  const auto& c = generator_.config();
  return distill_fields(c, common_.task, teacher_ ? teacher_->config().text_len : c.text_len,
                        common_.inputs == Inputs::Data);
}

std::map<std::string, at::Tensor> DmdModel::sample(const std::map<std::string, at::Tensor>& inputs,
                                                   std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  modules_->eval();
  const wan::SampleInputs given =
      wan::sample_inputs(inputs, generator_.config(), common_.task, common_.sampler.size, seed, device());
  if (common_.causal.enabled()) return causal_samples(given, seed);  // chunk by chunk, with the KV cache
  const auto velocity = [&](const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                            const torch::Tensor& sigma) {  // each step on the expert that owns its level
    const wan::AdapterScope generator_only(generator_.dits(), {true, false});
    return generator_.forward(x, t, context, given.y, sigma);
  };
  return wan::euler_sample(velocity, given, generator_.config(), common_.task, dmd_.generator_steps,
                           dmd_.generator_shift, 1.0, "renoise", seed);
}

std::map<std::string, at::Tensor> DmdModel::sample_streamed(const std::map<std::string, at::Tensor>& inputs,
                                                            std::uint64_t seed,
                                                            const std::function<void(const at::Tensor&)>& made) {
  if (!common_.causal.enabled()) return wanfw::Model::sample_streamed(inputs, seed, made);
  torch::NoGradGuard no_grad;
  modules_->eval();
  return causal_samples(
      wan::sample_inputs(inputs, generator_.config(), common_.task, common_.sampler.size, seed, device()), seed, made);
}

at::Tensor DmdModel::preview(const wanfw::Batch& batch, std::uint64_t seed) {
  return sample(preview_conditioning(batch, common_.task, noise_of(batch)), seed).at("latents");
}

void DmdModel::export_weights(const std::filesystem::path& folder, const wanfw::ExportSettings& settings) {
  if (shared())
    for (auto& dit : generator_.dits()) wan::remove_second_adapters(*dit);  // the critic stays behind
  wan::export_denoiser(generator_, common_.task, folder, settings);
}

}  // namespace wan_distill
