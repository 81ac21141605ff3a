#include <torch/torch.h>

#include "wan/block_ops.hpp"
#include "wan/causal_attention.hpp"
#include "wan/wan_dit.hpp"

namespace wan {

torch::Tensor WanGeluTanhImpl::forward(const torch::Tensor& x) { return gelu_tanh(x); }

WanBlockImpl::WanBlockImpl(const WanConfig& config, std::int64_t vace_index)
    : config_(config), vace_index_(vace_index) {
  reset();
}

void WanBlockImpl::reset() {
  const WanConfig& c = config_;
  self_attn = register_module("self_attn", WanAttention(c.dim, c.num_heads, c.eps));
  norm3 = register_module("norm3", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim}).eps(c.eps)));
  cross_attn = register_module("cross_attn", WanAttention(c.dim, c.num_heads, c.eps));
  ffn = register_module("ffn",
                        torch::nn::Sequential(WanLinear(c.dim, c.ffn_dim), WanGeluTanh(), WanLinear(c.ffn_dim, c.dim)));
  modulation = register_parameter("modulation", torch::randn({1, 6, c.dim}) / std::sqrt(static_cast<double>(c.dim)));
  if (vace_index_ == 0) before_proj = register_module("before_proj", torch::nn::Linear(c.dim, c.dim));
  if (vace_index_ >= 0) after_proj = register_module("after_proj", torch::nn::Linear(c.dim, c.dim));
}

torch::Tensor WanBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& e0, const torch::Tensor& context,
                                    const RopeTables& rope) {
  // shift, scale, gate for self-attention, then for the feed-forward network; all in fp32.
  const auto e = modulation_chunks(modulation, e0, 6);
  const bool split = rope.sequence != nullptr;
  torch::Tensor mixed;
  {  // the queries, keys and values go once mixed: a forward without a graph holds them no longer
    const auto qkv = attention_inputs(x, e, split ? torch::Tensor() : rope.rotations);
    mixed = self_mix(qkv[0], qkv[1], qkv[2], rope, x.scalar_type());
  }
  const auto text = [&] { return cross_attn->keys_values(context, {}); };
  // A rollout's passes without autograd share the text's keys and values, made once a block.
  const auto [context_key, context_value] =
      rope.causal != nullptr && rope.causal->cache != nullptr
          ? rope.causal->cache->context_keys_values(rope.causal->layer, context, text)
          : text();
  return after_attention(x, mixed, e, context_key, context_value);
}

torch::Tensor WanBlockImpl::self_mix(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const RopeTables& rope, at::ScalarType dtype) {
  const bool split = rope.sequence != nullptr;
  const CausalAttention* causal = rope.causal;
  if (causal == nullptr) return self_attn->mix(q, k, v, split ? &rope : nullptr, dtype);
  // Block-causal: over its frames, or the cache's too.
  torch::Tensor query = q, key = k, value = v;
  if (split) {  // sequence parallel: every token of this rank's heads, rotated, the padding dropped
    const auto heads = WanAttentionImpl::to_heads(query, key, value, rope);
    const std::int64_t tokens = rope.sequence->tokens();
    query = heads[0].narrow(1, 0, tokens), key = heads[1].narrow(1, 0, tokens), value = heads[2].narrow(1, 0, tokens);
  }
  std::vector<FrameTag> keys = causal->tags;
  if (causal->cache != nullptr || causal->held) {  // a rollout's pass, or its recomputation
    auto over = causal->cache != nullptr
                    ? causal->cache->pass(causal->layer, causal->first_frame, causal->frames, key, value)
                    : KvCache::attended(*causal->held, causal->first_frame, causal->frames, key, value);
    key = over.key, value = over.value, keys = std::move(over.frames);
  }
  const auto attend = [&](const torch::Tensor& aq, const torch::Tensor& ak, const torch::Tensor& av) {
    return self_attn->mix_masked(aq, ak, av, {}, dtype);
  };
  torch::Tensor mixed = causal_attention(*causal->layout, query, key, value, causal->tags, keys,
                                         query.size(1) / std::ssize(causal->tags), attend);
  if (!split) return mixed;
  // This rank's tokens of every head again, the padding's zero.
  const wanfw::SequenceSplit& sequence = *rope.sequence;
  const torch::Tensor heads = mixed.unflatten(2, {query.size(2), query.size(3)});
  const torch::Tensor padded = torch::constant_pad_nd(heads, {0, 0, 0, 0, 0, sequence.padded() - sequence.tokens()});
  return WanAttentionImpl::to_sequence(padded, rope).flatten(2);
}

std::array<torch::Tensor, 3> WanBlockImpl::attention_inputs(const torch::Tensor& x, const std::vector<torch::Tensor>& e,
                                                            const torch::Tensor& rotations) {
  const torch::Tensor attn_in = modulated_layer_norm(x, e[1], e[0], config_.eps);
  const torch::Tensor query = self_attn->queries(attn_in, rotations);
  auto [key, value] = self_attn->keys_values(attn_in, rotations);
  return {query, key, value};
}

torch::Tensor WanBlockImpl::after_attention(const torch::Tensor& x_in, const torch::Tensor& mixed,
                                            const std::vector<torch::Tensor>& e, const torch::Tensor& context_key,
                                            const torch::Tensor& context_value) {
  const auto dtype = x_in.scalar_type();
  torch::Tensor x = gated_residual(x_in, self_attn->o(mixed), e[2]);
  // norm3 (affine) in fp32 whatever the weights' dtype.
  const auto f32 = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
  const torch::Tensor normed =
      torch::layer_norm(f32(x), {config_.dim}, f32(norm3->weight), f32(norm3->bias), config_.eps);
  const torch::Tensor query = cross_attn->queries(normed.to(dtype), {});
  x = x + cross_attn->o(cross_attn->mix(query, context_key, context_value, nullptr, dtype));
  const torch::Tensor ffn_in = modulated_layer_norm(x, e[4], e[3], config_.eps);
  return gated_residual(x, ffn->forward(ffn_in), e[5]);
}

}  // namespace wan
