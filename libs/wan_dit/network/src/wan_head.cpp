#include <cmath>

#include <torch/torch.h>

#include "wan/block_ops.hpp"
#include "wan/wan_dit.hpp"

namespace wan {

WanHeadImpl::WanHeadImpl(const WanConfig& config) : config_(config) { reset(); }

void WanHeadImpl::reset() {
  const WanConfig& c = config_;
  head = register_module("head", torch::nn::Linear(c.dim, c.patch[0] * c.patch[1] * c.patch[2] * c.out_dim));
  modulation = register_parameter("modulation", torch::randn({1, 2, c.dim}) / std::sqrt(static_cast<double>(c.dim)));
}

torch::Tensor WanHeadImpl::forward(const torch::Tensor& x, const torch::Tensor& e) {
  const auto chunks = modulation_chunks(modulation, e.dim() == 2 ? e.unsqueeze(1) : e.unsqueeze(2), 2);
  return head(modulated_layer_norm(x, chunks[1], chunks[0], config_.eps));
}

}  // namespace wan
