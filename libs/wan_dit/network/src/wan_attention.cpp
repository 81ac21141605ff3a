#include <torch/torch.h>

#include "wan/attention_backend.hpp"
#include "wan/block_ops.hpp"
#include "wan/wan_dit.hpp"

namespace wan {

namespace {

// Attention over [B, L, H, D] tensors, returned as [B, L, H, D]; `mask` (boolean, true = attend)
// may be undefined, which means no mask at all: SDPA takes an absent mask, not an undefined tensor.
torch::Tensor attend(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                     const torch::Tensor& mask) {
  // [B, L, H, D] -> [B, H, L, D] for the fused attention kernels.
  const torch::Tensor q = query.transpose(1, 2), k = key.transpose(1, 2), v = value.transpose(1, 2);
  check_attention_kernel(q, k, v, mask);
  const std::optional<torch::Tensor> attn_mask = mask.defined() ? std::optional<torch::Tensor>(mask) : std::nullopt;
  return at::scaled_dot_product_attention(q, k, v, attn_mask).transpose(1, 2);
}

}  // namespace

WanRMSNormImpl::WanRMSNormImpl(std::int64_t dim, double eps) : dim_(dim), eps_(eps) { reset(); }

void WanRMSNormImpl::reset() { weight = register_parameter("weight", torch::ones({dim_})); }

torch::Tensor WanRMSNormImpl::forward(const torch::Tensor& x) { return rms_norm(x, weight, eps_); }

WanAttentionImpl::WanAttentionImpl(std::int64_t dim, std::int64_t num_heads, double eps)
    : dim_(dim), num_heads_(num_heads), eps_(eps) {
  reset();
}

void WanAttentionImpl::reset() {
  q = register_module("q", WanLinear(dim_, dim_));
  k = register_module("k", WanLinear(dim_, dim_));
  v = register_module("v", WanLinear(dim_, dim_));
  o = register_module("o", WanLinear(dim_, dim_));
  norm_q = register_module("norm_q", WanRMSNorm(dim_, eps_));
  norm_k = register_module("norm_k", WanRMSNorm(dim_, eps_));
}

torch::Tensor WanAttentionImpl::queries(const torch::Tensor& x, const torch::Tensor& rotations) {
  const torch::Tensor query = norm_q(q(x)).view({x.size(0), x.size(1), num_heads_, -1});
  return rotations.defined() ? wan::rope(query, rotations) : query;
}

std::pair<torch::Tensor, torch::Tensor> WanAttentionImpl::keys_values(const torch::Tensor& source,
                                                                      const torch::Tensor& rotations) {
  const auto heads = [&](const torch::Tensor& t) { return t.view({source.size(0), source.size(1), num_heads_, -1}); };
  torch::Tensor key = heads(norm_k(k(source)));
  if (rotations.defined()) key = wan::rope(key, rotations);
  return {key, heads(v(source))};
}

torch::Tensor WanAttentionImpl::mix(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                    const RopeTables* sequence_rope, torch::Dtype dtype) {
  if (sequence_rope == nullptr) return attend(query, key, value, {}).flatten(2).to(dtype);
  // Sequence parallel: every token of this rank's heads, attention over the whole (padded)
  // sequence with the padding masked, then this rank's tokens of every head again.
  const auto [q, k, v] = to_heads(query, key, value, *sequence_rope);
  torch::Tensor mask = sequence_rope->sequence->key_mask(query.device());  // undefined where no token is padding
  if (mask.defined()) mask = mask.view({1, 1, 1, -1});
  return to_sequence(attend(q, k, v, mask), *sequence_rope).flatten(2).to(dtype);
}

std::array<torch::Tensor, 3> WanAttentionImpl::to_heads(const torch::Tensor& query, const torch::Tensor& key,
                                                        const torch::Tensor& value, const RopeTables& sequence_rope) {
  const wanfw::DistributedSession& group = sequence_rope.sequence->group();
  return {wan::rope(wanfw::sequence_to_heads(query, group), sequence_rope.rotations),
          wan::rope(wanfw::sequence_to_heads(key, group), sequence_rope.rotations),
          wanfw::sequence_to_heads(value, group)};
}

torch::Tensor WanAttentionImpl::to_sequence(const torch::Tensor& heads, const RopeTables& sequence_rope) {
  return wanfw::heads_to_sequence(heads, sequence_rope.sequence->group());
}

torch::Tensor WanAttentionImpl::mix_masked(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value, const torch::Tensor& mask, torch::Dtype dtype) {
  return attend(query, key, value, mask).flatten(2).to(dtype);
}

torch::Tensor WanAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context, const RopeTables* rope) {
  // RoPE rotates whole sequences' queries and keys here, a split sequence's after the exchange in mix.
  const bool split = rope != nullptr && rope->sequence != nullptr;
  const torch::Tensor rotations = rope != nullptr && !split ? rope->rotations : torch::Tensor();
  const torch::Tensor query = queries(x, rotations);
  const auto [key, value] = keys_values(context.defined() ? context : x, rotations);
  return o(mix(query, key, value, split ? rope : nullptr, x.scalar_type()));
}

}  // namespace wan
