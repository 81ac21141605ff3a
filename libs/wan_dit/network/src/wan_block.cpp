#include <torch/torch.h>

#include "wan/block_ops.hpp"
#include "wan/wan_dit.hpp"

namespace wan {

torch::Tensor WanGeluTanhImpl::forward(const torch::Tensor& x) { return gelu_tanh(x); }

WanBlockImpl::WanBlockImpl(const WanConfig& config) : config_(config) { reset(); }

void WanBlockImpl::reset() {
  const WanConfig& c = config_;
  self_attn = register_module("self_attn", WanAttention(c.dim, c.num_heads, c.eps));
  norm3 = register_module("norm3", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim}).eps(c.eps)));
  cross_attn = register_module("cross_attn", WanAttention(c.dim, c.num_heads, c.eps));
  ffn = register_module("ffn", torch::nn::Sequential(WanLinear(c.dim, c.ffn_dim), WanGeluTanh(),
                                                     WanLinear(c.ffn_dim, c.dim)));
  modulation = register_parameter("modulation", torch::randn({1, 6, c.dim}) / std::sqrt(static_cast<double>(c.dim)));
}

torch::Tensor WanBlockImpl::forward(const torch::Tensor& x_in, const torch::Tensor& e0, const torch::Tensor& context,
                                    const RopeTables& rope) {
  // shift, scale, gate for self-attention, then for the feed-forward network; all in fp32.
  const double eps = config_.eps;
  const std::int64_t dim = config_.dim;
  const auto e = modulation_chunks(modulation, e0, 6);
  const auto dtype = x_in.scalar_type();
  torch::Tensor x = x_in;
  const torch::Tensor attn_in = modulated_layer_norm(x, e[1], e[0], eps);
  x = gated_residual(x, self_attn(attn_in, torch::Tensor(), &rope), e[2]);
  // norm3 (affine) in fp32 whatever the weights' dtype.
  const auto f32 = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
  const torch::Tensor normed = torch::layer_norm(f32(x), {dim}, f32(norm3->weight), f32(norm3->bias), eps);
  x = x + cross_attn(normed.to(dtype), context, nullptr);
  const torch::Tensor ffn_in = modulated_layer_norm(x, e[4], e[3], eps);
  return gated_residual(x, ffn->forward(ffn_in), e[5]);
}

}  // namespace wan
