#pragma once
// The network a Wan model denoises with: one Wan DiT, or the two experts of Wan2.2 A14B (the
// high-noise expert for t >= boundary, the low-noise expert below it), routed per sample. Shared by
// the flow-matching model (what it trains) and the distillation model (its teacher).

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/nn/cloneable.h>

#include "wan/lora.hpp"
#include "wan/wan_dit.hpp"

namespace wan {

enum class Expert { None, HighNoise, LowNoise, Both };
Expert parse_expert(const std::string& name);

/// The experts of a pair by index, the order of WanDenoiser::dits() and of the rank groups: 0 the
/// high-noise expert, 1 the low-noise one; their names in options, files, groups and folders.
inline constexpr const char* kExpertNames[2] = {"high_noise", "low_noise"};
/// 0 for "high_noise", 1 for "low_noise", -1 for another name.
int expert_index(std::string_view name);

/// Both experts, registered under the official folder names so that checkpoint keys say which
/// expert a tensor belongs to ("high_noise_model.blocks.0..."). With `held` 0 or 1 (the experts on
/// rank groups: wanfw/parallel/network_groups.hpp), only that expert is built (the other stays null), under
/// the same names.
class WanExpertPairImpl : public torch::nn::Cloneable<WanExpertPairImpl> {
 public:
  explicit WanExpertPairImpl(WanConfig config, WanPlacement placement = {}, int held = -1);
  void reset() override;
  WanDiT high_noise_model{nullptr}, low_noise_model{nullptr};

 private:
  WanConfig config_;
  WanPlacement placement_;
  int held_;
};
TORCH_MODULE(WanExpertPair);

/// Where each expert's weights are, below the `weights` option: the official download holds
/// high_noise_model/ and low_noise_model/, a diffusers pipeline transformer/ (high noise) and
/// transformer_2/ (low noise). With one expert, `weights` may also name that expert's own folder
/// or file. Returns (folder name in checkpoints, path, subfolder) for each expert trained; throws
/// wanfw::FileError when the layout does not fit the expert setting.
struct ExpertWeights {
  std::string expert;
  std::filesystem::path path;
  std::string subfolder;
};
std::vector<ExpertWeights> expert_weights(const std::filesystem::path& weights, const std::string& subfolder,
                                          Expert expert);

/// One line per expert for `wanfw model-info` / `validate`, checked from the safetensors headers
/// alone: "<label>[ of <expert>]: <path> (<layout> layout): every tensor present with the model's
/// shape", or that `weights` is not on this machine (it is checked when a run starts).
std::string describe_weights(const std::string& label, const WanConfig& config, const std::filesystem::path& weights,
                             const std::string& subfolder, Expert expert, bool new_vace_branch = false);

class WanDenoiser {
 public:
  /// `boundary` in sigma units (timestep / 1000); used when `expert` is not None. The weights are
  /// built where `placement` says (device and dtype), part by part. `held_expert` 0 (high noise)
  /// or 1 (low noise) with Both: this process holds that expert alone (the experts on rank groups),
  /// which then denoises every sample given (the data were routed before); -1: both.
  WanDenoiser(const WanConfig& config, Expert expert, double boundary, WanPlacement placement = {},
              int held_expert = -1);
  /// A replica of `other` on `device`: its modules cloned, weights and settings included.
  WanDenoiser(const WanDenoiser& other, const c10::Device& device);

  /// The velocity for noisy latents `x`, timesteps `t` ([B] or [B, tokens]), text `context`,
  /// image conditioning `y` (or undefined) and, for a VACE model, the control branch's input.
  /// `sigma` [B] picks each sample's expert when both experts are trained.
  /// `causal`: a causal student's pass (wan/causal_attention.hpp). An expert pair routes a
  /// rollout's step to the expert of its level (every sample at one level) with that expert's part
  /// of the cache, and runs a context pass through both; a pass without a cache routes as any.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                        const torch::Tensor& y, const torch::Tensor& sigma, const VaceInput& vace = {},
                        const CausalPass* causal = nullptr);

  /// [B] bool: the samples whose `sigma` routes them to the high-noise expert (t >= boundary).
  torch::Tensor high_noise_samples(const torch::Tensor& sigma) const;

  /// The trained module: the DiT itself, or the expert pair.
  std::shared_ptr<torch::nn::Module> module() const;
  /// Every DiT held (one, or the two experts).
  std::vector<WanDiT> dits() const;
  /// With Both: the expert this process holds alone (0 high noise, 1 low noise), or -1 for both.
  int held_expert() const { return held_; }
  /// With `new_vace_branch`, `weights` hold a base model: a VACE model's branch keeps the values
  /// it was built with (the official initialisation: its hints zero).
  void load_weights(const std::filesystem::path& weights, const std::string& subfolder, bool new_vace_branch = false);
  /// Applies `settings`: the adapters it loads are merged into the weights; with a rank, every
  /// DiT gets trained adapters (its base frozen), started from the adapters loaded with `train`.
  void apply_lora(const LoraSettings& settings);
  /// Attaches a second set of adapters to every DiT (a DMD critic's on the generator's base),
  /// each expert's drawn from a seed of its own as apply_lora's.
  void attach_second_adapters(const LoraSettings& settings);
  /// True when adapters train (module()'s other parameters are frozen).
  bool has_lora() const { return lora_; }
  /// A VACE model trained whole: every weight but the VACE branch's (vace_patch_embedding,
  /// vace_blocks) frozen, in every DiT and every replica.
  void train_vace_branch();
  bool trains_vace_branch() const { return vace_branch_; }
  /// "high_noise" / "low_noise" for the expert at `index` of dits(); "" without experts.
  std::string expert_name(std::size_t index) const;
  /// Every DiT's blocks as units of fully sharded training, named as module() names them below
  /// `prefix`.
  std::vector<wanfw::Unit> units(const std::string& prefix = "") const;
  /// The blocks of every DiT held (VACE blocks included), in units() order.
  std::size_t block_count() const;
  /// Runs the blocks through `runner` (null: directly). Throws wanfw::Error for both experts,
  /// whose blocks run or not by the samples' timesteps, unlike on other ranks.
  void set_unit_runner(wanfw::UnitRunner* runner);
  /// Every DiT splits each sample's tokens over `group` (WanDiTImpl::set_sequence_group).
  void set_sequence_group(const wanfw::DistributedSession* group);
  /// The sigma range this network is trained on: [0, 1], or one expert's side of the boundary.
  std::pair<double, double> sigma_range() const;
  Expert expert() const { return expert_; }
  double boundary() const { return boundary_; }
  const WanConfig& config() const { return config_; }

 private:
  /// forward's rollout pass for an expert pair (a pass with a cache).
  torch::Tensor rollout_pass(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                             const torch::Tensor& y, const torch::Tensor& sigma, const VaceInput& vace,
                             const CausalPass& causal);
  WanConfig config_;
  Expert expert_;
  double boundary_;
  WanDiT single_{nullptr};
  WanExpertPair pair_{nullptr};
  int held_ = -1;
  bool lora_ = false;
  bool vace_branch_ = false;
};

}  // namespace wan
