// The DMD objective (dmd_model.hpp): G's inputs (backward simulation or noised data), the three
// scores, the generator's distribution-matching step and the critic's flow-matching step. Every
// draw comes from the sample's own streams, so a sample computes the same wherever it trains.
#include <algorithm>

#include <fmt/format.h>
#include <torch/torch.h>

#include "distill_inputs.hpp"
#include "dmd/causal_rollout.hpp"
#include "dmd/dmd_model.hpp"
#include "negative_context.hpp"
#include "wan/lora.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wan_distill {

namespace {

torch::Tensor at_level(const torch::Tensor& sigma) { return sigma.to(torch::kFloat32).view({-1, 1, 1, 1, 1}); }

}  // namespace

torch::Tensor DmdModel::noise_of(const wanfw::Batch& batch) const {
  return distill_noise(batch, common_.latent_size, generator_.config().out_dim);
}

torch::Tensor DmdModel::timesteps(const torch::Tensor& sigma, const torch::Tensor& x) const {
  return wan::task_timesteps(sigma, x, generator_.config(), common_.task);
}

DmdModel::Conditions DmdModel::conditions(const wanfw::Batch& batch, const torch::Tensor& noise) const {
  Conditions c;
  c.context = batch.at("context");
  if (dmd_.guided()) c.negative = batch_negative(common_.negative, c.context);
  if (common_.task == wan::Task::I2V)
    c.y = wan::i2v_condition(wan::checked_condition(batch.at("image_condition"), noise, "distillation"));
  if (common_.inputs == Inputs::Data) {
    c.x0 = batch.at("latents").to(torch::kFloat32);
    wan::check_latents(generator_.config(), common_.task, c.x0, "distillation");
  } else {
    wan::check_latents(generator_.config(), common_.task, noise, "distillation");
  }
  return c;
}

torch::Tensor DmdModel::renoised(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& noise,
                                 const Conditions& c) const {
  return wan::noised_to(common_.task, x, sigma, noise, c.x0);
}

// Each pass runs every sample on the expert that owns its level `sigma` (one DiT: that one).
torch::Tensor DmdModel::generator_velocity(const torch::Tensor& x, const torch::Tensor& sigma, const Conditions& c) {
  const wan::AdapterScope generator_only(generator_.dits(), {true, false});
  return generator_.forward(x, timesteps(sigma, x), c.context, c.y, sigma).to(torch::kFloat32);
}

torch::Tensor DmdModel::critic_velocity(const torch::Tensor& x, const torch::Tensor& sigma, const Conditions& c) {
  if (!shared()) return modules_->critic->forward(x, timesteps(sigma, x), c.context, c.y).to(torch::kFloat32);
  const wan::AdapterScope critic_only(generator_.dits(), {false, true});
  return generator_.forward(x, timesteps(sigma, x), c.context, c.y, sigma).to(torch::kFloat32);
}

torch::Tensor DmdModel::real_velocity(const torch::Tensor& x, const torch::Tensor& sigma, const Conditions& c) {
  torch::NoGradGuard no_grad;
  const torch::Tensor t = timesteps(sigma, x);
  if (teacher_) return teacher_->velocity(x, t, c.context, c.negative, c.y, sigma, dmd_.real_guidance);
  // The shared base with both adapter sets off is the teacher.
  const wan::AdapterScope base_only(generator_.dits(), {false, false});
  const torch::Tensor conditional = generator_.forward(x, t, c.context, c.y, sigma).to(torch::kFloat32);
  if (!dmd_.guided()) return conditional;
  const torch::Tensor unconditional = generator_.forward(x, t, c.negative, c.y, sigma).to(torch::kFloat32);
  if (dmd_.low_noise_real_guidance == dmd_.real_guidance)
    return wan::guided_velocity(conditional, unconditional, dmd_.real_guidance);
  // Each sample guided as the expert that owns its level.
  const torch::Tensor scale = torch::where(generator_.high_noise_samples(sigma), dmd_.real_guidance,
                                           dmd_.low_noise_real_guidance)
                                  .to(conditional.options())
                                  .view({-1, 1, 1, 1, 1});
  return unconditional + scale * (conditional - unconditional);
}

torch::Tensor DmdModel::score_levels(const wanfw::Batch& batch, const char* stream) const {
  const torch::Tensor u = wanfw::sample_rand(batch, stream);
  return wan::shifted(dmd_.min_level + (dmd_.max_level - dmd_.min_level) * u, dmd_.score_shift);
}

DmdModel::GeneratorInput DmdModel::generator_input(const wanfw::Batch& batch, const Conditions& c,
                                                   const torch::Tensor& noise) {
  const std::vector<double> levels = dmd_.levels();
  const auto n = static_cast<std::int64_t>(levels.size());
  // The step each sample trains at, uniform over G's steps.
  const torch::Tensor k = (wanfw::sample_rand(batch, "generator_step") * static_cast<double>(n))
                              .floor()
                              .clamp(0, static_cast<double>(n - 1))
                              .to(torch::kLong);
  const torch::Tensor table = torch::tensor(levels, torch::kFloat64).to(noise.device());
  GeneratorInput in;
  in.sigma = table.index_select(0, k).to(torch::kFloat32);
  if (common_.inputs == Inputs::Data) {  // the data noised to each sample's level
    in.x = renoised(c.x0, in.sigma, noise, c);
    return in;
  }
  // Backward simulation: G's own steps from noise, without gradients, to each sample's level.
  // Every step runs for the whole batch whatever its samples' levels, so every rank makes the same
  // calls (a sharded or sequence-parallel G gathers inside each).
  torch::NoGradGuard no_grad;
  torch::Tensor x = noise;
  for (std::int64_t i = 0; i + 1 < n; ++i) {
    const torch::Tensor from = torch::full({noise.size(0)}, levels[static_cast<std::size_t>(i)], noise.options());
    const torch::Tensor to = torch::full_like(from, levels[static_cast<std::size_t>(i + 1)]);
    const torch::Tensor x0 = x - at_level(from) * generator_velocity(x, from, c);
    const torch::Tensor next = renoised(x0, to, wanfw::sample_randn(batch, fmt::format("rollout_noise/{}", i),
                                                                    noise.sizes().slice(1), torch::kFloat32), c);
    x = torch::where((k > i).view({-1, 1, 1, 1, 1}), next, x);  // samples at their level stay
  }
  in.x = x;
  return in;
}

wanfw::StepOutput DmdModel::training_step(const wanfw::Batch& batch) {
  std::optional<FrozenTeacher::Use> use;
  if (teacher_) use.emplace(*teacher_);
  const wan::DropoutSamplesScope dropout(generator_.dits(), batch);
  return phase_ == Phase::Generator ? generator_step(batch) : critic_step(batch);
}

DmdModel::DmdGradient DmdModel::dmd_gradient(const torch::Tensor& x, const torch::Tensor& sigma,
                                              const torch::Tensor& noise, const Conditions& c) {
  torch::NoGradGuard no_grad;
  const torch::Tensor xt = renoised(x, sigma, noise, c);
  const torch::Tensor x0_fake = xt - at_level(sigma) * critic_velocity(xt, sigma, c);
  const torch::Tensor x0_real = xt - at_level(sigma) * real_velocity(xt, sigma, c);
  DmdGradient out;
  out.normalizer = wan::predicted_mean(common_.task, (x - x0_real).abs());
  out.gradient = torch::nan_to_num((x0_fake - x0_real) / at_level(out.normalizer), 0.0, 0.0, 0.0);
  return out;
}

wanfw::StepOutput DmdModel::generator_step(const wanfw::Batch& batch) {
  const torch::Tensor noise = noise_of(batch);
  const Conditions c = conditions(batch, noise);
  GeneratorInput in;
  torch::Tensor v, x;  // G's velocity at its input, and its sample, with their graphs
  if (common_.causal.enabled()) {  // the self-rollout, every chunk to the step's exit step
    const std::vector<double> levels = dmd_.levels();
    const std::size_t exit = exit_step(batch, levels.size(), "exit_step");
    x = rollout(batch, c, noise, exit);
    in.sigma = torch::full({noise.size(0)}, levels[exit], noise.options());
  } else {
    in = generator_input(batch, c, noise);
    v = generator_velocity(in.x, in.sigma, c);
    x = in.x - at_level(in.sigma) * v;
  }
  const torch::Tensor score_level = score_levels(batch, "score_level");
  const DmdGradient g =
      dmd_gradient(x.detach(), score_level, wanfw::sample_randn(batch, "score_noise", noise.sizes().slice(1)), c);
  const torch::Tensor& gradient = g.gradient;
  const torch::Tensor& normalizer = g.normalizer;
  torch::Tensor v_real_in;
  if (dmd_.regression_weight > 0) v_real_in = real_velocity(in.x, in.sigma, c);  // never causal (refused)
  // d/dx of 0.5 mean (x - stopgrad(x - g))^2 is g / (elements): the DMD gradient.
  const torch::Tensor dmd = 0.5 * wan::predicted_mean(common_.task, (x - (x - gradient).detach()).pow(2));
  torch::Tensor loss = dmd.mean();
  std::map<std::string, at::Tensor> metrics = {
      {"dmd_loss", dmd.mean().detach()},
      {"dmd_gradient", wan::predicted_mean(common_.task, gradient.abs()).mean()},
      {"dmd_normalizer", normalizer.mean()},
      {"generator_level", in.sigma.mean().detach()}};
  add_expert_share(metrics, "generator", in.sigma);
  add_expert_share(metrics, "score", score_level);
  if (v_real_in.defined()) {
    const torch::Tensor regression = wan::predicted_mean(common_.task, (v - v_real_in).pow(2)).mean();
    loss = loss + dmd_.regression_weight * regression;
    metrics["regression_loss"] = regression.detach();
  }
  return {loss, metrics};
}

wanfw::StepOutput DmdModel::critic_step(const wanfw::Batch& batch) {
  const torch::Tensor noise = noise_of(batch);
  const Conditions c = conditions(batch, noise);
  torch::Tensor x;
  {
    torch::NoGradGuard no_grad;  // G's samples, as the generator step makes them
    if (common_.causal.enabled()) {
      x = rollout(batch, c, noise, exit_step(batch, dmd_.levels().size(), "critic_exit_step"));
    } else {
      const GeneratorInput in = generator_input(batch, c, noise);
      x = in.x - at_level(in.sigma) * generator_velocity(in.x, in.sigma, c);
    }
  }
  const torch::Tensor sigma = score_levels(batch, "critic_level");
  const torch::Tensor eps = wanfw::sample_randn(batch, "critic_noise", noise.sizes().slice(1));
  const torch::Tensor v = critic_velocity(renoised(x, sigma, eps, c), sigma, c);
  const torch::Tensor loss = wan::predicted_mean(common_.task, (v - (eps - x)).pow(2)).mean();
  std::map<std::string, at::Tensor> metrics = {{"critic_loss", loss.detach()}};
  add_expert_share(metrics, "critic", sigma);
  return {loss, metrics};
}

void DmdModel::add_expert_share(std::map<std::string, at::Tensor>& metrics, const std::string& what,
                                const torch::Tensor& sigma) const {
  if (generator_.expert() != wan::Expert::Both) return;
  metrics[what + "_high_noise_share"] = generator_.high_noise_samples(sigma).to(torch::kFloat32).mean();
}

std::map<std::string, at::Tensor> DmdModel::validation_step(const wanfw::Batch& batch) {
  torch::NoGradGuard no_grad;
  std::optional<FrozenTeacher::Use> use;
  if (teacher_) use.emplace(*teacher_);
  const wanfw::StepOutput critic = critic_step(batch);
  const wanfw::StepOutput generator = generator_step(batch);
  return {{"loss", critic.loss}, {"critic_loss", critic.loss}, {"dmd_gradient", generator.metrics.at("dmd_gradient")}};
}

std::map<std::string, at::Tensor> DmdModel::predict(const std::map<std::string, at::Tensor>& inputs) {
  torch::NoGradGuard no_grad;
  modules_->eval();
  const PredictInputs in = predict_inputs(inputs, device());
  const torch::Tensor &x = in.x, &sigma = in.sigma;
  Conditions c;
  c.context = in.context;
  c.y = in.y;
  c.negative = batch_negative(common_.negative, c.context);
  std::optional<FrozenTeacher::Use> use;
  if (teacher_) use.emplace(*teacher_);
  std::map<std::string, at::Tensor> out = {{"v", generator_velocity(x, sigma, c).cpu()},
                                           {"critic_v", critic_velocity(x, sigma, c).cpu()},
                                           {"teacher_v", real_velocity(x, sigma, c).cpu()}};
  if (in.noise.defined()) {  // x as G's sample, re-noised to t
    if (wan::keeps_first_frame(common_.task, x)) c.x0 = x;  // its first frame stays clean
    const DmdGradient g = dmd_gradient(x.to(torch::kFloat32), sigma, in.noise.to(torch::kFloat32), c);
    out["dmd_gradient"] = g.gradient.cpu();
    out["dmd_normalizer"] = g.normalizer.cpu();
  }
  return out;
}

}  // namespace wan_distill
