#pragma once
// The Wan flow-matching model (the plugin's wanfw::Model):
//
//   x_t = (1 - s) x0 + s eps,  t = 1000 s,  target v = eps - x0,  loss = mean w(t) (v_pred - v)^2
//
// Tasks: t2v (latents + text context); ti2v (the first latent frame stays clean, its tokens get
// t = 0 and are left out of the loss); i2v (the noisy latents are concatenated with a 4-channel
// first-frame mask and the data set's image_condition — the VAE latents of the image followed by
// zero frames, as the official I2V pipeline encodes them: in_dim = 2 out_dim + 4).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "expert_controls.hpp"
#include "wan/causal_options.hpp"
#include "wan/flow_matching.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/model.hpp"

namespace wan_fm {

using wan::Expert;
using wan::WanDenoiser;

struct FlowMatchingSettings {
  wan::Task task = wan::Task::T2V;
  bool last_frame = false;          ///< i2v: image_condition holds the first and the last frame (FLF)
  wan::TimestepSampling timesteps;  ///< how training draws s
  bool bell_weighting = false;
  Expert expert = Expert::None;
  double boundary = 0.0;                     ///< expert boundary / 1000
  std::vector<double> validation_timesteps;  ///< 0..1000
  wan::SamplerSettings sampler;              ///< `wanfw sample` and the preview
  wan::LoraSettings lora;                    ///< low-rank adapters (rank 0: every weight trains)
  ExpertControls experts;                    ///< expert: both: each expert's learning-rate scale and timestep range
  bool fp8_base = false;                     ///< base_dtype float8_e4m3fn: the frozen base's block weights in fp8
  bool new_vace_branch = false;              ///< vace_branch: new (the weights hold a base model)
  bool activation_offload = false;           ///< checkpointed blocks' inputs wait in host memory
  std::int64_t recompute_chunks = 1;         ///< a checkpointed block recomputed in chunks of tokens
  wan::CausalSettings causal;                ///< causal.*: a causal (streaming) student (causal_student.hpp)
  bool ode_pairs = false;                    ///< causal.training: ode_pairs, the regression on a teacher's ODE pairs
  std::vector<double> trajectory_steps;      ///< sample_trajectory_steps: the states `wanfw sample` records
};

class WanFlowMatchingModel final : public wanfw::Model {
 public:
  /// Builds the network where `placement` says (see wan::WanPlacement); with expert: both and
  /// `held_expert` 0 or 1, that expert alone (the experts on rank groups).
  WanFlowMatchingModel(const wan::WanConfig& config, FlowMatchingSettings settings, wan::WanPlacement placement = {},
                       int held_expert = -1);
  /// A replica: `other`'s modules cloned onto `device`.
  WanFlowMatchingModel(const WanFlowMatchingModel& other, const c10::Device& device);

  WanDenoiser& denoiser() { return denoiser_; }
  const FlowMatchingSettings& settings() const { return settings_; }
  std::shared_ptr<torch::nn::Module> module() override { return denoiser_.module(); }
  std::vector<wanfw::FieldSpec> batch_fields() const override;
  wanfw::StepOutput training_step(const wanfw::Batch& batch) override;
  std::map<std::string, at::Tensor> validation_step(const wanfw::Batch& batch) override;
  std::map<std::string, at::Tensor> predict(const std::map<std::string, at::Tensor>& inputs) override;
  std::map<std::string, at::Tensor> sample(const std::map<std::string, at::Tensor>& inputs,
                                           std::uint64_t seed) override;
  /// A causal student hands over each chunk as it is made.
  std::map<std::string, at::Tensor> sample_streamed(const std::map<std::string, at::Tensor>& inputs, std::uint64_t seed,
                                                    const std::function<void(const at::Tensor&)>& made) override;
  /// With adapters: one group "lora" (lora.lr_scale, lora.weight_decay) holding them alone.
  std::vector<wanfw::ParameterGroup> parameter_groups() override;
  /// With adapters: the adapters alone; a VACE branch trained whole: the branch alone (the base is
  /// rebuilt from model.weights and lora.load).
  std::vector<std::pair<std::string, at::Tensor>> checkpoint_tensors() override;
  /// The official layout: one DiT in `folder`; experts in folder/high_noise_model and
  /// folder/low_noise_model (a single trained expert in its own subfolder). With adapters: the
  /// adapter files there (wan::write_adapter_files), or merged full weights.
  void export_weights(const std::filesystem::path& folder, const wanfw::ExportSettings& settings) override;
  std::unique_ptr<wanfw::Model> replicate(const c10::Device& device) override;
  /// expert: both: the two experts, which rank groups can hold apart (wanfw/parallel/network_groups.hpp).
  std::vector<wanfw::PlaceableNetwork> networks() const override;
  /// Each sample's expert (0 high noise, 1 low noise) from its timestep draw, as training_step
  /// draws it.
  std::vector<int> route(const wanfw::Batch& keys) const override;
  /// Each DiT block a unit (fsdp).
  std::vector<wanfw::Unit> units() override { return denoiser_.units(); }
  double planned_device_bytes() const override { return planned_device_bytes_; }
  /// What the memory plan (wan/memory_plan.hpp) predicts for this run.
  void set_planned_device_bytes(double bytes) { planned_device_bytes_ = bytes; }
  void set_unit_runner(wanfw::UnitRunner* runner) override { denoiser_.set_unit_runner(runner); }
  /// Each sample's tokens split over `group` (Ulysses); refused with LoRA dropout, whose masks
  /// are drawn over whole sequences.
  bool set_sequence_group(const wanfw::DistributedSession* group) override;
  /// The first sample's latent video [1, C, T, h, w] drawn with `preview_steps` guided Euler
  /// steps, for the VAE (model.vae) to decode or the host to show as a strip; a VACE model's with
  /// its control's latents beside it ([1, C, T, h, 2w]).
  at::Tensor preview(const wanfw::Batch& batch, std::uint64_t seed) override;

 private:
  struct Objective {
    torch::Tensor loss, per_sample, prediction, target;
  };
  /// Each sample's sigma, from its "timestep" stream: [B] fp32.
  torch::Tensor sample_sigma(const wanfw::Batch& batch) const;
  /// With expert: both, each expert's loss over the samples `sigma` [B] routes to it, and its share.
  void add_expert_means(wanfw::StepOutput& step, const torch::Tensor& sigma, const torch::Tensor& per_sample) const;
  Objective objective(const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& sigma,
                      const torch::Tensor& context, const torch::Tensor& image_condition, const wan::VaceInput& vace);
  /// The batch's image_condition for i2v (undefined for the other tasks).
  torch::Tensor image_condition_of(const wanfw::Batch& batch) const;
  /// The batch's vace_context for a VACE model (undefined for the others).
  torch::Tensor vace_context_of(const wanfw::Batch& batch) const;
  /// Per-token timesteps for ti2v (the first frame's tokens at 0), else t as given: [B] -> [B] or [B, L].
  torch::Tensor timesteps(const torch::Tensor& sigma, const torch::Tensor& latents) const;
  torch::Device device() const;
  /// Throws naming `what` when the latents cannot be cut into the DiT's patches.
  void check_latents(const torch::Tensor& latents, const char* what) const;
  std::map<std::string, at::Tensor> draw(const std::map<std::string, at::Tensor>& inputs, std::uint64_t seed,
                                         std::int64_t steps, const std::function<void(const at::Tensor&)>& made = {});

  WanDenoiser denoiser_;
  FlowMatchingSettings settings_;
  double planned_device_bytes_ = 0;
};

}  // namespace wan_fm
