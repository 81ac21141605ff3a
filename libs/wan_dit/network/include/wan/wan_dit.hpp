#pragma once
// The Wan DiT (Wan2.1 / Wan2.2 blocks) as LibTorch modules, registered under the official
// checkpoint names so that loading an official checkpoint is a lookup. Every module is Cloneable
// (`clone(device)` gives an independent replica, as DataParallel needs). The block's modules are
// wan/wan_block.hpp's.

#include <array>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "wan/wan_block.hpp"
#include "wan/wan_config.hpp"
#include "wan/wan_linear.hpp"
#include "wanfw/parallel/sequence_parallel.hpp"
#include "wanfw/parallel/units.hpp"

namespace wan {

struct CausalPass;  // wan/causal_attention.hpp

/// Where a DiT's weights live. Each part (embeddings, every block, the head) is built and
/// initialised on the CPU in float32 (so initial weights do not depend on the device), then moved
/// here before the next part is built: a 14B model never exists whole in fp32 on the CPU.
struct WanPlacement {
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;
  /// The blocks' Linear weights (attention projections, feed-forward) stored in float8 e4m3 with
  /// scales and frozen (WanLinearImpl::quantize_base), each block quantized from float32 before it
  /// is placed; norms, modulation, embeddings, time projection and head stay in `dtype`.
  bool fp8_base = false;
  /// The VACE branch trains whole: its blocks stay in `dtype` under fp8_base (else, a frozen base
  /// for adapters, they are quantized as the main blocks are).
  bool trained_vace = false;
  BaseStorage storage() const { return {fp8_base, trained_vace}; }
};

/// The VACE branch's input: `context` [B, vace_in_dim, F, H, W] on the latents' grid (reference
/// frames prepended as the latents' are), and each hint's scale (empty: 1; one value: every hint's).
struct VaceInput {
  torch::Tensor context;
  std::vector<double> scales;
};

/// The whole DiT: patchify, text and time conditioning, blocks, head, unpatchify.
class WanDiTImpl : public torch::nn::Cloneable<WanDiTImpl> {
 public:
  explicit WanDiTImpl(WanConfig config, WanPlacement placement = {});
  /// Registers the submodules part by part, each with the official initialisation (xavier
  /// linears, N(0, 0.02) embeddings, zero head) and then placed (Cloneable calls it on a fresh
  /// copy before copying the weights).
  void reset() override;

  /// `x` [B, in_dim - y_channels, F, H, W] noisy latents; `t` [B] or [B, tokens] timesteps on the
  /// 0..1000 scale; `context` [B, Lc, text_dim] with Lc <= text_len, zero-padded to text_len as
  /// the official model does; `y` (optional) [B, C_y, F, H, W] concatenated to `x` along
  /// channels (I2V); `vace` the control branch's input, which a VACE model (config().has_vace())
  /// requires and any other refuses. Returns [B, out_dim, F, H, W].
  ///
  /// VACE: the branch is a chain of blocks on the embedded context, the first adding the embedded
  /// latents (before_proj(c) + x), each emitting a hint (after_proj) that is added, times its
  /// scale, to the output of main block vace_layers[n]. VACE block n runs right after that main
  /// block rather than all before the first: the same operations on the same values, with one hint
  /// alive at a time instead of all of them.
  ///
  /// `causal` (a causal student, wan/causal_attention.hpp; null: bidirectional): self-attention
  /// block-causal over the latents' frames, `t` [B, F] a timestep a latent frame (or [B] or [B,
  /// tokens]); with a KV cache, the latents are frames first_frame.. of a rollout (their RoPE
  /// positions), attending to the frames the cache holds before them.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                        const torch::Tensor& y = {}, const VaceInput& vace = {}, const CausalPass* causal = nullptr);

  /// Recompute each block's activations in the backward pass instead of keeping them: memory
  /// for activations drops to one block's, at the price of a second forward per block.
  void set_gradient_checkpointing(bool enabled) { gradient_checkpointing_ = enabled; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }
  /// With gradient checkpointing: each block's saved input kept in host memory (pinned, copied
  /// asynchronously on a GPU) instead of on the device, and copied back for its recomputation.
  void set_activation_offload(bool enabled) { activation_offload_ = enabled; }
  bool activation_offload() const { return activation_offload_; }
  /// With gradient checkpointing: each block run and recomputed in `chunks` chunks of tokens, the
  /// self-attention over every token at once (checkpointed_block); 1: whole.
  void set_recompute_chunks(std::int64_t chunks) { recompute_chunks_ = chunks; }
  std::int64_t recompute_chunks() const { return recompute_chunks_; }
  /// Each block is a unit (wanfw/parallel/units.hpp: fsdp gathers it, block swap streams it), its forward run
  /// through `runner` as unit `first_unit` + its index, the VACE blocks after the main ones (unit
  /// first_unit + num_layers + n); null runs the blocks directly.
  void set_unit_runner(wanfw::UnitRunner* runner, std::size_t first_unit) {
    unit_runner_ = runner;
    first_unit_ = first_unit;
  }
  /// The blocks as units (the main blocks, then the VACE blocks), their parameters named with
  /// `prefix` (the DiT's name in the trained module).
  std::vector<wanfw::Unit> units(const std::string& prefix);
  /// The blocks the DiT runs as units: num_layers + the VACE blocks.
  std::size_t unit_count() const { return blocks->size() + (vace_blocks ? vace_blocks->size() : 0); }
  /// Sequence parallelism (wanfw/parallel/sequence_parallel.hpp): each sample's tokens split over `group`
  /// after the patch embedding, the blocks and head run on this rank's share, self-attention over
  /// every token through two all-to-alls (the padding masked), the outputs gathered before
  /// unpatchifying. Null: whole sequences. Throws wanfw::Error when the heads do not divide
  /// over the group.
  void set_sequence_group(const wanfw::DistributedSession* group);
  const WanConfig& config() const { return config_; }
  /// Tokens of a latent of F x H x W after patching.
  std::array<std::int64_t, 3> token_grid(std::int64_t frames, std::int64_t height, std::int64_t width) const;

  torch::nn::Conv3d patch_embedding{nullptr};
  torch::nn::Sequential text_embedding{nullptr}, time_embedding{nullptr}, time_projection{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  WanHead head{nullptr};
  /// VACE only (config().has_vace()): the context's patch embedding and the branch's blocks.
  torch::nn::Conv3d vace_patch_embedding{nullptr};
  torch::nn::ModuleList vace_blocks{nullptr};
  /// The adapters' dropout streams (wan::attach_adapters makes them; null without adapters).
  std::shared_ptr<LoraDropoutStreams> lora_dropout;
  /// Which adapters the layers add, with a second set attached (wan::attach_second_adapters; null: the first alone).
  std::shared_ptr<AdapterSelection> adapter_selection;

 private:
  /// `context` checked and zero-padded to text_len tokens.
  torch::Tensor padded_context(const torch::Tensor& context, std::int64_t batch) const;
  /// Registers the VACE branch as the official model builds it: PyTorch's default initialisation,
  /// before_proj and after_proj zero (the hints start at nothing); placed part by part.
  void reset_vace();
  /// The embedded VACE context [B, L, dim] for latents `x_full` [B, in_dim, F, H, W], checked with
  /// the scales; undefined for a model without the branch (which refuses a context).
  torch::Tensor embedded_vace(const VaceInput& vace, const torch::Tensor& x_full);
  /// VACE block `n` run as its unit (first_unit + num_layers + n), checkpointed with its
  /// projections when `checkpoint`: from the branch's `state` (and for n = 0 the `embedded`
  /// latents), its next state and its hint.
  std::array<torch::Tensor, 2> vace_unit(std::size_t n, const torch::Tensor& state, const torch::Tensor& embedded,
                                         const torch::Tensor& e0, const torch::Tensor& context,
                                         const RopeTables& rope, bool checkpoint);
  /// How a checkpointed block recomputes, from the DiT's settings.
  Recomputation recomputation() const;
  /// The RoPE tables of a token grid on a device, its frames at positions first_frame.. (a causal
  /// rollout's chunk); those from frame 0 built once and kept.
  RopeTables rope_for(const std::array<std::int64_t, 3>& grid, const torch::Device& device,
                      std::int64_t first_frame = 0);

  WanConfig config_;
  WanPlacement placement_;
  bool gradient_checkpointing_ = false;
  bool activation_offload_ = false;
  std::int64_t recompute_chunks_ = 1;
  wanfw::UnitRunner* unit_runner_ = nullptr;
  const wanfw::DistributedSession* sequence_group_ = nullptr;
  std::optional<wanfw::SequenceSplit> split_;  ///< the last forward's (its backward reads it)
  std::set<std::int64_t> split_logged_;         ///< token counts whose split was logged
  std::size_t first_unit_ = 0;
  std::array<torch::Tensor, 3> rope_angles_;  ///< [max_positions, part / 2] float64, per axis
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::string>, RopeTables> rope_cache_;
};
TORCH_MODULE(WanDiT);

/// Sinusoidal embedding of timesteps `t` (any shape) into `dim` channels, cos half first,
/// computed in float64 and returned as float32: [..., dim].
torch::Tensor sinusoidal_embedding(const torch::Tensor& t, std::int64_t dim);

}  // namespace wan
