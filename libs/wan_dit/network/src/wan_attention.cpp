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

torch::Tensor WanAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context, const RopeTables* rope) {
  const torch::Tensor& source = context.defined() ? context : x;
  const std::int64_t batch = x.size(0);
  auto heads = [&](const torch::Tensor& t) { return t.view({batch, t.size(1), num_heads_, -1}); };
  torch::Tensor query = heads(norm_q(q(x)));
  torch::Tensor key = heads(norm_k(k(source)));
  torch::Tensor value = heads(v(source));
  if (rope != nullptr && rope->sequence != nullptr) {
    // Sequence parallel: every token of this rank's heads, attention over the whole (padded)
    // sequence with the padding masked, then this rank's tokens of every head again.
    const wanfw::SequenceSplit& split = *rope->sequence;
    query = wan::rope(wanfw::sequence_to_heads(query, split.group()), rope->rotations);
    key = wan::rope(wanfw::sequence_to_heads(key, split.group()), rope->rotations);
    value = wanfw::sequence_to_heads(value, split.group());
    torch::Tensor mask = split.key_mask(x.device());  // undefined where no token is padding
    if (mask.defined()) mask = mask.view({1, 1, 1, -1});
    const torch::Tensor out = attend(query, key, value, mask);
    return o(wanfw::heads_to_sequence(out, split.group()).flatten(2).to(x.scalar_type()));
  }
  if (rope != nullptr) {
    query = wan::rope(query, rope->rotations);
    key = wan::rope(key, rope->rotations);
  }
  return o(attend(query, key, value, {}).flatten(2).to(x.scalar_type()));
}

}  // namespace wan
