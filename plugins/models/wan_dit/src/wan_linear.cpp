#include "wan/wan_linear.hpp"

#include <cmath>

#include <torch/torch.h>

namespace wan {

WanLinearImpl::WanLinearImpl(std::int64_t in, std::int64_t out) : in_(in), out_(out) { reset(); }

void WanLinearImpl::reset() {
  weight = register_parameter("weight", torch::empty({out_, in_}));
  bias = register_parameter("bias", torch::empty({out_}));
  {
    // torch::nn::Linear's own initialisation, draw for draw: the DiT's random initial weights stay
    // what they were when these layers were torch::nn::Linear (the DiT then re-initialises them).
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
  if (lora_.rank > 0) make_adapter();
}

void WanLinearImpl::make_adapter() {
  lora_A = register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in_, lora_.rank).bias(false)));
  lora_B = register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(lora_.rank, out_).bias(false)));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(lora_A->weight, std::sqrt(5.0));
  torch::nn::init::zeros_(lora_B->weight);
}

void WanLinearImpl::attach_lora(const LoraShape& shape, torch::Dtype dtype) {
  if (lora_A) {
    unregister_module("lora_A");
    unregister_module("lora_B");
    lora_A = nullptr;
    lora_B = nullptr;
  }
  lora_ = shape;
  if (lora_.rank == 0) return;
  make_adapter();
  lora_A->to(weight.device(), dtype);
  lora_B->to(weight.device(), dtype);
}

torch::Tensor WanLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::nn::functional::linear(x, weight, bias);
  if (lora_.rank == 0) return y;
  torch::Tensor h = x.to(lora_A->weight.scalar_type());
  if (lora_.dropout > 0 && is_training()) h = torch::dropout(h, lora_.dropout, /*train=*/true);
  const double scale = lora_.alpha / static_cast<double>(lora_.rank);
  return y + (lora_B(lora_A(h)) * scale).to(y.scalar_type());
}

}  // namespace wan
