#include "flow_matching_model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include "causal_student.hpp"
#include "wan/causal_sampler.hpp"
#include "wan/dit_export.hpp"
#include "wan/lora.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"
#include "wanfw/sample_random.hpp"

namespace wan_fm {

namespace {

/// The mean of exp(-2 ((t - 500) / 1000)^2) over t in [0, 1000): the bell weighting's normaliser.
double bell_normaliser() {
  static const double norm = [] {
    double total = 0;
    for (int i = 0; i < 1000; ++i) total += std::exp(-2 * std::pow((i - 500) / 1000.0, 2));
    return total / 1000;
  }();
  return norm;
}

const char* kPredictInputs =
    "give x [B,C,F,H,W], t [B] or [B,tokens], context [B,L,text_dim] (and y for image conditioning, vace_context "
    "and optionally vace_scale [1 or hints] for a VACE model); or x0, noise, sigma and context to evaluate the loss";

}  // namespace

WanFlowMatchingModel::WanFlowMatchingModel(const wan::WanConfig& config, FlowMatchingSettings settings,
                                           wan::WanPlacement placement, int held_expert)
    : denoiser_(config, settings.expert, settings.boundary, placement, held_expert), settings_(std::move(settings)) {}

std::vector<wanfw::PlaceableNetwork> WanFlowMatchingModel::networks() const {
  if (settings_.expert != Expert::Both) return {};
  return {{wan::kExpertNames[0], "high_noise_model."}, {wan::kExpertNames[1], "low_noise_model."}};
}

std::vector<int> WanFlowMatchingModel::route(const wanfw::Batch& keys) const {
  if (settings_.expert != Expert::Both) return wanfw::Model::route(keys);
  const torch::Tensor high = denoiser_.high_noise_samples(sample_sigma(keys)).contiguous();
  std::vector<int> routes(static_cast<std::size_t>(high.numel()));
  const bool* is_high = high.data_ptr<bool>();
  for (std::size_t i = 0; i < routes.size(); ++i) routes[i] = is_high[i] ? 0 : 1;
  return routes;
}

torch::Tensor WanFlowMatchingModel::vace_context_of(const wanfw::Batch& batch) const {
  return denoiser_.config().has_vace() ? batch.at("vace_context") : torch::Tensor();
}

std::vector<wanfw::ParameterGroup> WanFlowMatchingModel::parameter_groups() {
  if (settings_.expert == Expert::Both) return expert_groups(denoiser_, settings_.lora, settings_.experts);
  if (!denoiser_.has_lora()) return wanfw::Model::parameter_groups();
  return {wan::adapter_group(*module(), settings_.lora)};
}

bool WanFlowMatchingModel::set_sequence_group(const wanfw::DistributedSession* group) {
  if (group != nullptr && denoiser_.has_lora() && settings_.lora.dropout > 0)
    throw wanfw::Error(
        "LoRA dropout draws its masks over each sample's whole token sequence, which sequence "
        "parallelism splits across ranks",
        "set model.lora.dropout: 0, or strategy.sequence_parallel: 1");
  denoiser_.set_sequence_group(group);
  return true;
}

std::vector<std::pair<std::string, at::Tensor>> WanFlowMatchingModel::checkpoint_tensors() {
  if (denoiser_.trains_vace_branch()) return trainable_parameters();  // the base is rebuilt from model.weights
  if (!denoiser_.has_lora()) return wanfw::Model::checkpoint_tensors();
  return wan::adapter_parameters(*module());
}

WanFlowMatchingModel::WanFlowMatchingModel(const WanFlowMatchingModel& other, const c10::Device& device)
    : denoiser_(other.denoiser_, device), settings_(other.settings_) {}

std::unique_ptr<wanfw::Model> WanFlowMatchingModel::replicate(const c10::Device& device) {
  return std::make_unique<WanFlowMatchingModel>(*this, device);
}

torch::Device WanFlowMatchingModel::device() const { return denoiser_.dits().front()->parameters().front().device(); }

std::vector<wanfw::FieldSpec> WanFlowMatchingModel::batch_fields() const {
  std::vector<wanfw::FieldSpec> fields = wan::task_fields(denoiser_.config(), settings_.task);
  if (settings_.ode_pairs)
    for (auto& field : ode_pair_fields(settings_, denoiser_.config().out_dim)) fields.push_back(std::move(field));
  return fields;
}

void WanFlowMatchingModel::check_latents(const torch::Tensor& latents, const char* what) const {
  wan::check_latents(denoiser_.config(), settings_.task, latents, what);
}

torch::Tensor WanFlowMatchingModel::image_condition_of(const wanfw::Batch& batch) const {
  return settings_.task == wan::Task::I2V ? batch.at("image_condition") : torch::Tensor();
}

torch::Tensor WanFlowMatchingModel::sample_sigma(const wanfw::Batch& batch) const {
  return draw_expert_sigma(batch, settings_.timesteps, settings_.experts);
}

torch::Tensor WanFlowMatchingModel::timesteps(const torch::Tensor& sigma, const torch::Tensor& latents) const {
  return wan::task_timesteps(sigma, latents, denoiser_.config(), settings_.task);
}

WanFlowMatchingModel::Objective WanFlowMatchingModel::objective(const torch::Tensor& x0, const torch::Tensor& noise,
                                                                const torch::Tensor& sigma,
                                                                const torch::Tensor& context,
                                                                const torch::Tensor& image_condition,
                                                                const wan::VaceInput& vace) {
  const torch::Tensor xt = wan::noised_to(settings_.task, x0, sigma, noise, x0);
  const torch::Tensor target = noise - x0;
  const torch::Tensor y =
      settings_.task == wan::Task::I2V
          ? wan::i2v_condition(wan::checked_condition(image_condition, x0, "training"), settings_.last_frame)
          : torch::Tensor();
  const torch::Tensor prediction = denoiser_.forward(xt, timesteps(sigma, x0), context, y, sigma, vace);
  torch::Tensor error = (prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).pow(2);
  torch::Tensor per_sample = wan::predicted_mean(settings_.task, error);
  if (settings_.bell_weighting)
    per_sample =
        per_sample * torch::exp(-2 * ((sigma.to(torch::kFloat32) * 1000 - 500) / 1000).pow(2)) / bell_normaliser();
  return {per_sample.mean(), per_sample, prediction, target};
}

wanfw::StepOutput WanFlowMatchingModel::training_step(const wanfw::Batch& batch) {
  // Noise and timestep come from the sample's own streams: the same wherever the sample is trained.
  const torch::Tensor x0 = batch.at("latents");
  check_latents(x0, "training");
  const torch::Tensor noise = wanfw::sample_randn(batch, "noise", x0.sizes().slice(1), x0.scalar_type());
  const wan::DropoutSamplesScope dropout(denoiser_.dits(), batch);
  if (settings_.ode_pairs) {  // the teacher's state at one of its levels a chunk, from the sample's stream
    const torch::Tensor step =
        draw_ode_steps(batch, settings_, causal_chunks(settings_, x0.size(2), "training")).to(x0.device());
    const torch::Tensor error = causal_ode_error(denoiser_, settings_, batch.at("trajectory"),
                                                 batch.at("trajectory_timesteps"), x0, step, batch.at("context"));
    wanfw::StepOutput out{error.mean(), {{"ode_step_mean", step.mean().detach()}}};
    // Each sample's expert: the one of its highest level (every chunk's is on that side).
    const torch::Tensor highest = batch.at("trajectory_timesteps")
                                      .to(torch::kFloat32)
                                      .gather(1, std::get<0>(step.to(torch::kLong).min(1)).unsqueeze(1));
    add_expert_means(out, highest.squeeze(1) / 1000, error);
    return out;
  }
  if (settings_.causal.enabled()) {  // teacher forcing: a level a chunk, from the sample's stream
    const auto chunks = causal_chunks(settings_, x0.size(2), "training");
    const torch::Tensor chunk_sigma =
        settings_.expert == Expert::Both
            ? draw_expert_chunk_sigma(batch, settings_.timesteps, settings_.experts, chunks).to(x0.device())
            : wan::draw_sigma(batch, settings_.timesteps, chunks);
    const torch::Tensor error = causal_error(denoiser_, settings_, x0, noise, chunk_sigma, batch.at("context"));
    wanfw::StepOutput out{error.mean(), {{"sigma_mean", chunk_sigma.mean().detach()}}};
    add_expert_means(out, std::get<0>(chunk_sigma.max(1)), error);
    return out;
  }
  const torch::Tensor sigma = sample_sigma(batch);
  const Objective out =
      objective(x0, noise, sigma, batch.at("context"), image_condition_of(batch), {vace_context_of(batch), {}});
  wanfw::StepOutput step{out.loss, {{"sigma_mean", sigma.mean().detach()}}};
  add_expert_means(step, sigma, out.per_sample);
  return step;
}

void WanFlowMatchingModel::add_expert_means(wanfw::StepOutput& step, const torch::Tensor& sigma,
                                            const torch::Tensor& per_sample) const {
  if (settings_.expert != Expert::Both) return;  // each expert's loss over the samples routed to it
  const torch::Tensor high = denoiser_.high_noise_samples(sigma).to(per_sample.device(), torch::kFloat64);
  const torch::Tensor losses = per_sample.detach().to(torch::kFloat64);
  step.sample_means["loss/high_noise"] = {(losses * high).sum(), high.sum()};
  step.sample_means["loss/low_noise"] = {(losses * (1 - high)).sum(), (1 - high).sum()};
  step.sample_means["share/high_noise"] = {high.sum(), torch::full({}, static_cast<double>(high.numel()))};
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::validation_step(const wanfw::Batch& batch) {
  // The same noise at every fixed timestep: one curve per timestep, comparable across steps
  // (validation batches keep their seed and epoch, so each sample draws the same noise every time).
  const torch::Tensor x0 = batch.at("latents");
  check_latents(x0, "validation");
  if (settings_.ode_pairs) {  // each of the teacher's states, every chunk at it
    const auto chunks = causal_chunks(settings_, x0.size(2), "validation");
    const std::vector<double> levels = wan::warped_timesteps(settings_.causal.steps, settings_.sampler.shift);
    return wan::per_timestep(levels, "loss_t", [&](double s) {
      const auto k =
          std::find_if(levels.begin(), levels.end(), [&](double t) { return std::abs(t - 1000 * s) < 1e-6; });
      const torch::Tensor step = torch::full({x0.size(0), chunks}, static_cast<double>(k - levels.begin()));
      return causal_ode_error(denoiser_, settings_, batch.at("trajectory"), batch.at("trajectory_timesteps"), x0,
                              step.to(x0.device()), batch.at("context"))
          .mean();
    });
  }
  const torch::Tensor noise = wanfw::sample_randn(batch, "noise", x0.sizes().slice(1), x0.scalar_type());
  return wan::per_timestep(settings_.validation_timesteps, "loss_t", [&](double s) {
    if (settings_.causal.enabled()) {  // every chunk at the level
      const auto chunks = causal_chunks(settings_, x0.size(2), "validation");
      const torch::Tensor levels = torch::full({x0.size(0), chunks}, s, x0.options().dtype(torch::kFloat32));
      return causal_error(denoiser_, settings_, x0, noise, levels, batch.at("context")).mean();
    }
    const torch::Tensor sigma = torch::full({x0.size(0)}, s, x0.options().dtype(torch::kFloat32));
    return objective(x0, noise, sigma, batch.at("context"), image_condition_of(batch), {vace_context_of(batch), {}})
        .loss;
  });
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::predict(const std::map<std::string, at::Tensor>& inputs) {
  torch::NoGradGuard no_grad;
  module()->eval();
  const torch::Device dev = device();
  auto input = [&](const char* name, bool required = true) -> torch::Tensor {
    auto it = inputs.find(name);
    if (it != inputs.end()) return it->second.to(dev);
    if (required) throw wanfw::Error(fmt::format("predict: the inputs have no tensor '{}'", name), kPredictInputs);
    return {};
  };
  wan::VaceInput vace{input("vace_context", denoiser_.config().has_vace()), {}};
  if (const torch::Tensor scale = input("vace_scale", false); scale.defined()) {
    const torch::Tensor values = scale.to(torch::kCPU, torch::kFloat64).contiguous().flatten();
    vace.scales.assign(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
  }
  if (inputs.count("x0")) {  // the training objective for given draws
    const Objective out = objective(input("x0"), input("noise"), input("sigma"), input("context"),
                                    input("image_condition", settings_.task == wan::Task::I2V), vace);
    return {{"loss", out.loss.cpu()}, {"v", out.prediction.cpu()}, {"target", out.target.cpu()}};
  }
  const torch::Tensor t = input("t");
  // The expert of each sample follows its timestep (per-token timesteps: the noisy tokens' one).
  const torch::Tensor sigma = (t.dim() == 2 ? std::get<0>(t.max(1)) : t).to(torch::kFloat32) / 1000.0;
  return {{"v", denoiser_.forward(input("x"), t, input("context"), input("y", false), sigma, vace).cpu()}};
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::sample(const std::map<std::string, at::Tensor>& inputs,
                                                               std::uint64_t seed) {
  return draw(inputs, seed, settings_.sampler.steps);
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::sample_streamed(
    const std::map<std::string, at::Tensor>& inputs, std::uint64_t seed,
    const std::function<void(const at::Tensor&)>& made) {
  if (!settings_.causal.enabled()) return wanfw::Model::sample_streamed(inputs, seed, made);
  return draw(inputs, seed, settings_.sampler.steps, made);
}

at::Tensor WanFlowMatchingModel::preview(const wanfw::Batch& batch, std::uint64_t seed) {
  const auto inputs = wan::preview_inputs(batch, settings_.task, settings_.sampler.size);
  const torch::Tensor made = draw(inputs, seed, settings_.sampler.preview_steps).at("latents");
  const auto control = inputs.find("vace_context");
  if (control == inputs.end()) return made;
  // A VACE run shows its control beside what the model made: the context's reactive latents (the
  // control video where the mask says generate, as the VAE encoded it), to the right.
  const std::int64_t channels = denoiser_.config().out_dim;
  return torch::cat({made, control->second.narrow(1, channels, channels).to(made.device(), made.scalar_type())}, 4);
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::draw(const std::map<std::string, at::Tensor>& inputs,
                                                             std::uint64_t seed, std::int64_t steps,
                                                             const std::function<void(const at::Tensor&)>& made) {
  torch::NoGradGuard no_grad;
  module()->eval();
  const wan::SampleInputs given = wan::sample_inputs(inputs, denoiser_.config(), settings_.task, settings_.sampler.size,
                                                     seed, device(), settings_.last_frame);
  if (settings_.expert == Expert::HighNoise || settings_.expert == Expert::LowNoise)
    wanfw::log::warn(
        fmt::format("sampling with the {} expert alone: it denoises every step, also those the other expert takes",
                    settings_.expert == Expert::HighNoise ? "high-noise" : "low-noise"));
  if (settings_.causal.enabled())  // chunk by chunk, with the KV cache
    return {{"latents",
             causal_draw(denoiser_, settings_, given.context, given.image, given.noise.sizes(), seed, device(), made)
                 .cpu()}};
  const auto velocity = [&](const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                            const torch::Tensor& sigma) {
    return denoiser_.forward(x, t, context, given.y, sigma, {given.vace_context, settings_.sampler.vace_scales});
  };
  std::vector<double> record;  // a teacher's ODE pairs: its states at the student's levels
  for (const double t : wan::warped_timesteps(settings_.trajectory_steps, settings_.sampler.shift))
    record.push_back(t / 1000.0);
  return wan::euler_sample(velocity, given, denoiser_.config(), settings_.task, steps, settings_.sampler.shift,
                           settings_.sampler.guidance, settings_.sampler.solver, seed, record);
}

void WanFlowMatchingModel::export_weights(const std::filesystem::path& folder, const wanfw::ExportSettings& settings) {
  wan::export_denoiser(denoiser_, settings_.task, folder, settings);
}

}  // namespace wan_fm
