#pragma once
// The modules of a Wan DiT block (attention, feed-forward, modulation) and the head, registered
// under the official checkpoint names, and the checkpointed block that recomputes one in backward.
// wan/wan_dit.hpp assembles them into the DiT.

#include <array>
#include <optional>
#include <utility>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "wan/wan_config.hpp"
#include "wan/wan_linear.hpp"
#include "wanfw/parallel/sequence_parallel.hpp"

namespace wan {

struct CausalAttention;  // wan/causal_attention.hpp

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
  /// A causal forward (wan/causal_attention.hpp): the block-causal mask, or a rollout's KV cache,
  /// and the block this copy of the tables is for. Null: bidirectional attention.
  const CausalAttention* causal = nullptr;
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
  /// Sequence parallel: this rank's tokens of every head -> every (padded) token of this rank's
  /// heads, the queries and keys rotated by the split sequence's `sequence_rope`; and back.
  static std::array<torch::Tensor, 3> to_heads(const torch::Tensor& query, const torch::Tensor& key,
                                               const torch::Tensor& value, const RopeTables& sequence_rope);
  static torch::Tensor to_sequence(const torch::Tensor& heads, const RopeTables& sequence_rope);
  /// Attention of whole sequences' queries over keys and values under `mask` ([queries, keys], true
  /// where a query attends; undefined: none), heads flattened, in `dtype`.
  torch::Tensor mix_masked(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                           const torch::Tensor& mask, torch::Dtype dtype);
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
  /// self_mix; per token again, the rest of the block from the mix, with the cross-attention's
  /// keys and values of the context (cross_attn->keys_values(context, {})).
  std::array<torch::Tensor, 3> attention_inputs(const torch::Tensor& x, const std::vector<torch::Tensor>& e,
                                                const torch::Tensor& rotations);
  /// The self-attention of every token from its queries, keys and values: block-causal where
  /// `rope.causal` says (over a rollout pass's cache, or the frames a recomputed pass held), and
  /// bidirectional otherwise; a split sequence rotated and exchanged inside.
  torch::Tensor self_mix(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                         const RopeTables& rope, at::ScalarType dtype);
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

}  // namespace wan
