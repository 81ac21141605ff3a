#pragma once
// The Wan DMD model (`objective: dmd`): a few-step generator G trained by distribution matching
// (DMD2) against the frozen teacher's guided score and a critic's score of G's own samples. Two
// training phases (wanfw::TrainingPhase): "generator" one step, then "critic" K steps.
//
//   x_k    G's input at its level s_k, k drawn per sample: G's own no-grad steps from noise
//          (inputs: generator, backward simulation) or (1 - s_k) x0 + s_k eps (inputs: data)
//   x      = x_k - s_k v_G(x_k)                                    G's sample (its x0 prediction)
//   x_t    = (1 - s) x + s eps',  s = shift(U[min, max])             re-noised, fresh draws
//   g      = (x0_critic(x_t) - x0_real(x_t)) / mean |x - x0_real(x_t)|   per sample, x0 = x_t - s v
//   generator loss = 0.5 mean (x - stopgrad(x - g))^2  [+ w mean (v_G(x_k) - v_real(x_k))^2]
//   critic loss    = mean (v_critic(x_t) - (eps' - stopgrad(x)))^2  on fresh draws
//
// module() holds "generator" and (unless the base is shared) "critic". With a shared base the
// generator's DiT carries the critic's adapters as its second set, and the base with no adapters
// is the real score: one copy of the frozen weights serves all three. The generator may be both
// experts of a two-expert teacher (A14B, shared base): each expert carries its generator's and its
// critic's adapters, and every pass (G's steps, the critic's and the real score) runs each sample
// on the expert that owns its level (wan::WanDenoiser::forward).

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distill_settings.hpp"
#include "dmd/dmd_settings.hpp"
#include "networks/frozen_teacher.hpp"
#include "wan/causal_sampler.hpp"

namespace wan_distill {

/// The trained modules: the generator (one DiT, or the expert pair) and, unless it shares the
/// generator's base, the critic.
struct DmdModulesImpl : torch::nn::Module {
  DmdModulesImpl(const std::shared_ptr<torch::nn::Module>& generator_module, wan::WanDiT critic_dit);
  wan::WanDiT critic{nullptr};
};
TORCH_MODULE(DmdModules);

class DmdModel final : public wanfw::Model {
 public:
  /// `critic` null: the shared base (the critic's adapters are `generator`'s second set, and
  /// `teacher` may be null: the base without adapters is the real score).
  DmdModel(wan::WanDenoiser generator, wan::WanDiT critic, std::shared_ptr<FrozenTeacher> teacher,
           DistillSettings common, DmdSettings dmd);
  /// A replica on `device` (data_parallel).
  DmdModel(const DmdModel& other, const c10::Device& device);

  std::shared_ptr<torch::nn::Module> module() override { return modules_.ptr(); }
  const DmdSettings& dmd() const { return dmd_; }
  /// "generator" (G's weights or adapters) and "critic" (at critic_lr_scale).
  std::vector<wanfw::ParameterGroup> parameter_groups() override;
  /// "generator" one step, then "critic" critic_updates steps.
  std::vector<wanfw::TrainingPhase> phases() override;
  /// The phase at `phase`'s place in phases(), kept by what it is: the step branches on it by name.
  void set_phase(int phase) override;
  /// The trained tensors: a DiT with adapters contributes its adapters alone (its base is rebuilt
  /// from the teacher), one without every parameter and buffer.
  std::vector<std::pair<std::string, at::Tensor>> checkpoint_tensors() override;
  std::vector<wanfw::FieldSpec> batch_fields() const override;
  wanfw::StepOutput training_step(const wanfw::Batch& batch) override;
  /// Without gradients: "critic_loss" and "dmd_gradient" (mean |g|) on G's samples; "loss" = critic_loss.
  std::map<std::string, at::Tensor> validation_step(const wanfw::Batch& batch) override;
  /// Inputs x, t ([B] or [B, tokens]), context (y for i2v): "v" (G), "critic_v" and "teacher_v" (the guided real
  /// score) at (x, t). With "noise" too, x is taken as G's sample: "dmd_gradient" g and
  /// "dmd_normalizer" [B] at x re-noised to t with that noise, as the generator step computes them.
  std::map<std::string, at::Tensor> predict(const std::map<std::string, at::Tensor>& inputs) override;
  /// G's samples: generator_steps steps of the renoise solver at G's levels.
  std::map<std::string, at::Tensor> sample(const std::map<std::string, at::Tensor>& inputs,
                                           std::uint64_t seed) override;
  /// A causal generator hands over each chunk as it is made.
  std::map<std::string, at::Tensor> sample_streamed(const std::map<std::string, at::Tensor>& inputs,
                                                    std::uint64_t seed,
                                                    const std::function<void(const at::Tensor&)>& made) override;
  /// G alone, in the official layout or (adapters) as an adapter in both layouts; never the critic.
  void export_weights(const std::filesystem::path& folder, const wanfw::ExportSettings& settings) override;
  /// G's sample of the first sample's conditioning, for the run's VAE or the latent strip.
  at::Tensor preview(const wanfw::Batch& batch, std::uint64_t seed) override;
  std::unique_ptr<wanfw::Model> replicate(const c10::Device& device) override;
  std::vector<wanfw::Unit> units() override;
  void set_unit_runner(wanfw::UnitRunner* runner) override;
  /// Every network (generator, critic, teacher) splits each sample's tokens over `group`; every
  /// rank of the group holds the same samples, so the objective's draws and sums over whole
  /// tensors are the same on each. Throws wanfw::Error for LoRA dropout (masks over whole
  /// sequences) or a teacher on another device.
  bool set_sequence_group(const wanfw::DistributedSession* group) override;
  /// The memory plan's device bytes (distill_memory.hpp), logged beside the first step's peak.
  double planned_device_bytes() const override { return planned_device_bytes_; }
  void set_planned_device_bytes(double bytes) { planned_device_bytes_ = bytes; }

 private:
  /// G's input for each sample: x_k [B, C, F, H, W] and its level s_k [B].
  struct GeneratorInput {
    torch::Tensor x, sigma;
  };
  /// What the step conditions on: context, the negative context (guidance), y (i2v), x0 (data).
  struct Conditions {
    torch::Tensor context, negative, y, x0;
  };
  Conditions conditions(const wanfw::Batch& batch, const torch::Tensor& noise) const;
  GeneratorInput generator_input(const wanfw::Batch& batch, const Conditions& c, const torch::Tensor& noise);
  /// Velocities: G's, the critic's, the real score's (guided); float32.
  torch::Tensor generator_velocity(const torch::Tensor& x, const torch::Tensor& sigma, const Conditions& c);
  torch::Tensor critic_velocity(const torch::Tensor& x, const torch::Tensor& sigma, const Conditions& c);
  torch::Tensor real_velocity(const torch::Tensor& x, const torch::Tensor& sigma, const Conditions& c);
  /// Per-sample levels in the score range, from `stream`.
  torch::Tensor score_levels(const wanfw::Batch& batch, const char* stream) const;
  /// x re-noised to `sigma` with `noise` (ti2v keeps the data's clean first frame).
  torch::Tensor renoised(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& noise,
                         const Conditions& c) const;
  /// The normalised DMD gradient at G's sample `x` re-noised to `sigma` with `noise`, and the
  /// per-sample normaliser mean |x - x0_real| [B]; without autograd.
  struct DmdGradient {
    torch::Tensor gradient, normalizer;
  };
  DmdGradient dmd_gradient(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& noise,
                           const Conditions& c);
  /// With both experts: "<what>_high_noise_share", the share of `sigma`'s samples the high-noise
  /// expert ran (none with one DiT).
  void add_expert_share(std::map<std::string, at::Tensor>& metrics, const std::string& what,
                        const torch::Tensor& sigma) const;
  wanfw::StepOutput generator_step(const wanfw::Batch& batch);
  wanfw::StepOutput critic_step(const wanfw::Batch& batch);
  /// A causal generator (dmd/causal_rollout.hpp): its sampler's steps for `frames` latent frames,
  /// its velocity in a causal pass, its self-rollout from `noise` exiting at step `exit` (with the
  /// graph of each chunk's exit forward under grad mode), and its streamed samples.
  wan::CausalSampling causal_sampling(std::int64_t frames) const;
  wan::CausalVelocity causal_velocity(const torch::Tensor& context);
  torch::Tensor rollout(const wanfw::Batch& batch, const Conditions& c, const torch::Tensor& noise, std::size_t exit);
  std::map<std::string, at::Tensor> causal_samples(const wan::SampleInputs& given, std::uint64_t seed,
                                                   const std::function<void(const at::Tensor&)>& made = {});
  torch::Tensor noise_of(const wanfw::Batch& batch) const;
  torch::Tensor timesteps(const torch::Tensor& sigma, const torch::Tensor& x) const;
  torch::Device device() const;
  bool shared() const { return !modules_->critic; }

  enum class Phase { Generator, Critic };
  /// The phases in cycle order, named: phases() and set_phase read this one table, so reordering
  /// it reorders the cycle and never swaps the losses.
  static constexpr std::array<std::pair<Phase, const char*>, 2> kPhases{
      {{Phase::Generator, "generator"}, {Phase::Critic, "critic"}}};

  wan::WanDenoiser generator_;  ///< before modules_, which registers its module
  DmdModules modules_{nullptr};
  std::shared_ptr<FrozenTeacher> teacher_;
  DistillSettings common_;
  DmdSettings dmd_;
  Phase phase_ = Phase::Generator;
  double planned_device_bytes_ = 0;
};

}  // namespace wan_distill
