#pragma once
// The Wan DiT (Wan2.1 / Wan2.2 blocks) as LibTorch modules, registered under the official
// checkpoint names so that loading an official checkpoint is a lookup. Every module is Cloneable
// (`clone(device)` gives an independent replica, as DataParallel needs).

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

#include "wan/wan_config.hpp"
#include "wan/wan_linear.hpp"
#include "wanfw/parallel/sequence_parallel.hpp"
#include "wanfw/parallel/units.hpp"

namespace wan {

/// RMSNorm over the whole hidden dim (all heads), computed in fp32, with a learnable weight.
class WanRMSNormImpl : public torch::nn::Cloneable<WanRMSNormImpl> {
 public:
  WanRMSNormImpl(std::int64_t dim, double eps);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  std::int64_t dim_;
  double eps_;
};
TORCH_MODULE(WanRMSNorm);

/// The 3-D RoPE rotations for one token grid: [tokens, head_dim / 2] complex64 (angles worked
/// out in float64, the rotation applied in float32).
struct RopeTables {
  torch::Tensor rotations;
  /// Sequence parallelism: the split of the tokens over the group (self-attention exchanges them
  /// for heads and back; `rotations` then covers the padded sequence). Null: whole sequences.
  const wanfw::SequenceSplit* sequence = nullptr;
};

/// Multi-head attention with q/k RMSNorm; self-attention applies RoPE, cross-attention does not.
class WanAttentionImpl : public torch::nn::Cloneable<WanAttentionImpl> {
 public:
  WanAttentionImpl(std::int64_t dim, std::int64_t num_heads, double eps);
  void reset() override;
  /// `x` [B, L, dim]; `context` [B, Lc, dim] for cross-attention, or undefined for self-attention.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, const RopeTables* rope);
  /// forward's parts, o(mix(queries(x), keys_values(source))), for a block recomputed in chunks of
  /// tokens: `x`'s queries [B, L, heads, head_dim], RMS-normed and, with `rotations` [L, head_dim / 2]
  /// defined, rotated (RoPE of whole sequences); `source`'s keys (likewise) and values.
  torch::Tensor queries(const torch::Tensor& x, const torch::Tensor& rotations);
  std::pair<torch::Tensor, torch::Tensor> keys_values(const torch::Tensor& source, const torch::Tensor& rotations);
  /// Attention of the queries over the keys and values, heads flattened, in `dtype`: [B, L, dim]
  /// before the output projection. `sequence_rope` (a split sequence's tables, or null) exchanges
  /// tokens for heads and rotates there.
  torch::Tensor mix(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                    const RopeTables* sequence_rope, torch::Dtype dtype);
  WanLinear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  WanRMSNorm norm_q{nullptr}, norm_k{nullptr};

 private:
  std::int64_t dim_;
  std::int64_t num_heads_;
  double eps_;
};
TORCH_MODULE(WanAttention);

/// The feed-forward network's activation: GELU with the tanh approximation (wan::gelu_tanh).
class WanGeluTanhImpl : public torch::nn::Cloneable<WanGeluTanhImpl> {
 public:
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x);
};
TORCH_MODULE(WanGeluTanh);

/// One transformer block. With `vace_index` n >= 0 it is VACE block n (vace_blocks.n): the same
/// block, plus `after_proj` (its hint: a Linear of its output) and, for n = 0, `before_proj` (the
/// embedded context's projection, added to the embedded latents); the DiT applies both around forward.
class WanBlockImpl : public torch::nn::Cloneable<WanBlockImpl> {
 public:
  explicit WanBlockImpl(const WanConfig& config, std::int64_t vace_index = -1);
  void reset() override;
  /// `e0`: the time projection, [B, 6, dim] or [B, L, 6, dim] (one timestep per token).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& e0, const torch::Tensor& context,
                        const RopeTables& rope);
  /// forward's parts, for a recomputation in chunks of tokens (checkpointed_block): per token, the
  /// self-attention's queries, keys and values of `x` (`e`: modulation_chunks(modulation, e0, 6)
  /// for x's tokens; `rotations`: theirs, undefined for a split sequence); over every token,
  /// self_attn->mix; per token again, the rest of the block from the mix, with the cross-attention's
  /// keys and values of the context (cross_attn->keys_values(context, {})).
  std::array<torch::Tensor, 3> attention_inputs(const torch::Tensor& x, const std::vector<torch::Tensor>& e,
                                                const torch::Tensor& rotations);
  torch::Tensor after_attention(const torch::Tensor& x, const torch::Tensor& mixed, const std::vector<torch::Tensor>& e,
                                const torch::Tensor& context_key, const torch::Tensor& context_value);
  WanAttention self_attn{nullptr}, cross_attn{nullptr};
  torch::nn::LayerNorm norm3{nullptr};
  torch::nn::Sequential ffn{nullptr};
  torch::Tensor modulation;
  torch::nn::Linear before_proj{nullptr}, after_proj{nullptr};  ///< VACE blocks only

 private:
  WanConfig config_;
  std::int64_t vace_index_;
};
TORCH_MODULE(WanBlock);

class WanHeadImpl : public torch::nn::Cloneable<WanHeadImpl> {
 public:
  explicit WanHeadImpl(const WanConfig& config);
  void reset() override;
  /// `e`: the time embedding, [B, dim] or [B, L, dim].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& e);
  torch::nn::Linear head{nullptr};
  torch::Tensor modulation;

 private:
  WanConfig config_;
};
TORCH_MODULE(WanHead);

/// What a block runs on: its hidden states `x`, the time projection `e0`, the text context and the
/// rotations.
struct BlockInputs {
  const torch::Tensor& x;
  const torch::Tensor& e0;
  const torch::Tensor& context;
  const RopeTables& rope;
};

/// How checkpointed_block recomputes. With `dropout` (adapters with dropout), the recomputation
/// draws the masks of the forward's samples. With `selection` (a second adapter set attached), it
/// adds the adapters the forward added, whatever is selected when backward runs. With `offload`, the
/// saved input waits in host memory (pinned on a GPU) until backward. With `chunks` > 1, the block
/// runs and is recomputed in that many chunks of tokens, the self-attention whole
/// (libs/wan_dit/network/src/chunked_recompute.hpp).
struct Recomputation {
  LoraDropoutStreams* dropout = nullptr;
  AdapterSelection* selection = nullptr;
  bool offload = false;
  std::int64_t chunks = 1;
};

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
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                        const torch::Tensor& y = {}, const VaceInput& vace = {});

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
  /// The RoPE tables of a token grid on a device, built once and kept.
  /// How a checkpointed block recomputes, from the DiT's settings.
  Recomputation recomputation() const;
  const RopeTables& rope_for(const std::array<std::int64_t, 3>& grid, const torch::Device& device);

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

/// Runs `block` on `in` without keeping the activations: they are recomputed from the saved inputs
/// during backward (under the autocast state of the forward), as `how` says, and the gradients of
/// the inputs and of the block's parameters are returned from there.
torch::Tensor checkpointed_block(WanBlockImpl& block, const BlockInputs& in, const Recomputation& how = {});

/// checkpointed_block for VACE block `block`: from the branch's state (`in.x`; and, for block 0, the
/// embedded latents `embedded` it adds after before_proj; undefined for the others), its next
/// state and its hint (after_proj), the projections recomputed with the block (so that a streamed
/// unit keeps none of its weights for backward).
std::array<torch::Tensor, 2> checkpointed_vace_block(WanBlockImpl& block, const BlockInputs& in,
                                                     const torch::Tensor& embedded, const Recomputation& how = {});

/// Sinusoidal embedding of timesteps `t` (any shape) into `dim` channels, cos half first,
/// computed in float64 and returned as float32: [..., dim].
torch::Tensor sinusoidal_embedding(const torch::Tensor& t, std::int64_t dim);

}  // namespace wan
