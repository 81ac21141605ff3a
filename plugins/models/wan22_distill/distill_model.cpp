#include "distill_model.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <torch/torch.h>

#include "distill_inputs.hpp"
#include "negative_context.hpp"
#include "networks/replicas.hpp"
#include "wan/dit_export.hpp"
#include "wan/wan_weights.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wan_distill {

DistillModel::DistillModel(const wan::WanConfig& student, DistillSettings settings,
                           std::shared_ptr<FrozenTeacher> teacher, wan::WanPlacement placement)
    : student_(student, placement), settings_(std::move(settings)), teacher_(std::move(teacher)) {}

DistillModel::DistillModel(const DistillModel& other, const c10::Device& device)
    : student_(replica_dit(other.student_, device)),
      settings_(other.settings_),
      teacher_(replica_teacher(other.teacher_, other.device(), device)) {}

std::vector<wanfw::ParameterGroup> DistillModel::parameter_groups() {
  if (!settings_.lora.enabled()) return wanfw::Model::parameter_groups();
  return {wan::adapter_group(*module(), settings_.lora)};
}

std::vector<std::pair<std::string, at::Tensor>> DistillModel::checkpoint_tensors() {
  if (!settings_.lora.enabled()) return wanfw::Model::checkpoint_tensors();
  return wan::adapter_parameters(*module());
}

std::unique_ptr<wanfw::Model> DistillModel::replicate(const c10::Device& device) {
  return std::make_unique<DistillModel>(*this, device);
}

torch::Device DistillModel::device() const { return student_->parameters().front().device(); }

std::vector<wanfw::FieldSpec> DistillModel::batch_fields() const {
  // Data-free: the latents come from the teacher's trajectory.
  return distill_fields(student_->config(), settings_.task, teacher_->config().text_len,
                        settings_.inputs == Inputs::Data);
}

torch::Tensor DistillModel::noise_of(const wanfw::Batch& batch) const {
  return distill_noise(batch, settings_.latent_size, student_->config().out_dim);
}

DistillModel::Point DistillModel::point(const wanfw::Batch& batch, const torch::Tensor& sigma,
                                        const torch::Tensor& noise) {
  const auto& c = student_->config();
  Point p;
  p.sigma = sigma;
  p.noise = noise;
  p.context = batch.at("context");
  if (settings_.guidance != 1.0) p.negative = batch_negative(settings_.negative, p.context);  // guided target
  if (settings_.task == wan::Task::I2V)
    p.y = wan::i2v_condition(wan::checked_condition(batch.at("image_condition"), noise, "distillation"));
  if (settings_.inputs == Inputs::Data) {
    p.x0 = batch.at("latents");
    wan::check_latents(c, settings_.task, p.x0, "distillation");
    p.xt = wan::noised_to(settings_.task, p.x0, sigma, noise, p.x0);
  } else {
    // Where the teacher goes: Euler steps of its (guided) velocity from noise at s = 1 down to
    // each sample's level, evenly spaced in s.
    wan::check_latents(c, settings_.task, noise, "distillation");
    torch::Tensor x = noise;
    const std::int64_t k = settings_.trajectory_steps;
    for (std::int64_t i = 0; i < k; ++i) {
      const torch::Tensor from = 1 - (1 - sigma) * (static_cast<double>(i) / static_cast<double>(k));
      const torch::Tensor to = 1 - (1 - sigma) * (static_cast<double>(i + 1) / static_cast<double>(k));
      const torch::Tensor v = teacher_->velocity(x, wan::task_timesteps(from, x, c, settings_.task), p.context,
                                                 p.negative, p.y, from, settings_.guidance);
      x = x + (to - from).to(torch::kFloat32).view({-1, 1, 1, 1, 1}) * v;
    }
    p.xt = x.detach();
  }
  p.t = wan::task_timesteps(sigma, p.xt, c, settings_.task);
  return p;
}

DistillModel::Terms DistillModel::terms(const Point& p, bool with_flow_matching) {
  const torch::Tensor target =
      teacher_->velocity(p.xt, p.t, p.context, p.negative, p.y, p.sigma, settings_.guidance);
  const torch::Tensor v = student_->forward(p.xt, p.t, p.context, p.y).to(torch::kFloat32);
  auto per_sample = [&](const torch::Tensor& error) { return wan::predicted_mean(settings_.task, error); };
  Terms out;
  out.velocity = per_sample((v - target).pow(2));
  if (with_flow_matching) out.flow_matching = per_sample((v - (p.noise - p.x0).to(torch::kFloat32)).pow(2));
  return out;
}

wanfw::StepOutput DistillModel::training_step(const wanfw::Batch& batch) {
  FrozenTeacher::Use use(*teacher_);
  // Noise and level from the sample's own streams: the same wherever the sample is trained.
  const torch::Tensor noise = noise_of(batch);
  const torch::Tensor sigma = wan::draw_sigma(batch, settings_.timesteps);
  const Point p = point(batch, sigma, noise);
  const bool fm = settings_.flow_matching_weight > 0;
  const wan::DropoutSamplesScope dropout({student_}, batch);
  const Terms e = terms(p, fm);
  torch::Tensor loss = settings_.velocity_weight * e.velocity.mean();
  std::map<std::string, at::Tensor> metrics = {{"velocity_loss", e.velocity.mean().detach()},
                                               {"sigma_mean", sigma.mean().detach()}};
  if (fm) {
    loss = loss + settings_.flow_matching_weight * e.flow_matching.mean();
    metrics["flow_matching_loss"] = e.flow_matching.mean().detach();
  }
  return {loss, metrics};
}

std::map<std::string, at::Tensor> DistillModel::validation_step(const wanfw::Batch& batch) {
  FrozenTeacher::Use use(*teacher_);
  const torch::Tensor noise = noise_of(batch);
  return wan::per_timestep(settings_.validation_timesteps, "gap_t", [&](double s) {
    const torch::Tensor sigma = torch::full({batch.size}, s, noise.options());
    return terms(point(batch, sigma, noise), false).velocity.mean();
  });
}

std::map<std::string, at::Tensor> DistillModel::predict(const std::map<std::string, at::Tensor>& inputs) {
  torch::NoGradGuard no_grad;
  student_->eval();
  const PredictInputs in = predict_inputs(inputs, device());
  const torch::Tensor &x = in.x, &t = in.t, &context = in.context, &y = in.y, &sigma = in.sigma;
  const torch::Tensor negative = batch_negative(settings_.negative, context);
  FrozenTeacher::Use use(*teacher_);
  return {{"v", student_->forward(x, t, context, y).cpu()},
          {"teacher_v", teacher_->velocity(x, t, context, negative, y, sigma, settings_.guidance).cpu()}};
}

std::map<std::string, at::Tensor> DistillModel::sample(const std::map<std::string, at::Tensor>& inputs,
                                                       std::uint64_t seed) {
  return draw(inputs, seed, settings_.sampler.steps);
}

std::map<std::string, at::Tensor> DistillModel::draw(const std::map<std::string, at::Tensor>& inputs,
                                                     std::uint64_t seed, std::int64_t steps) {
  torch::NoGradGuard no_grad;
  student_->eval();
  const auto& c = student_->config();
  const wan::SampleInputs given = wan::sample_inputs(inputs, c, settings_.task, settings_.sampler.size, seed, device());
  const auto velocity = [&](const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                            const torch::Tensor&) { return student_->forward(x, t, context, given.y); };
  return wan::euler_sample(velocity, given, c, settings_.task, steps, settings_.sampler.shift,
                           settings_.sampler.guidance, settings_.sampler.solver, seed);
}

at::Tensor DistillModel::preview(const wanfw::Batch& batch, std::uint64_t seed) {
  const auto inputs = preview_conditioning(batch, settings_.task, noise_of(batch));
  return draw(inputs, seed, settings_.sampler.preview_steps).at("latents");
}

void DistillModel::export_weights(const std::filesystem::path& folder, const wanfw::ExportSettings& settings) {
  wan::export_dit(*student_, settings_.task, folder, settings);
}

}  // namespace wan_distill
