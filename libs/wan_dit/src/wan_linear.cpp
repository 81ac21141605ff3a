#include "wan/wan_linear.hpp"

#include <cmath>

#include <ATen/autocast_mode.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wan {

LoraDropoutStreams::Samples LoraDropoutStreams::samples_of(const wanfw::Batch& batch) {
  return {batch.sample_ids, batch.epoch, batch.seed, batch.device()};
}

torch::Tensor LoraDropoutStreams::keep_mask(const std::string& layer, at::IntArrayRef shape, double p,
                                            torch::Dtype dtype) const {
  if (!samples_)
    throw wanfw::Error(fmt::format("adapter dropout in {}: no samples are set for this forward", layer),
                       "LoRA dropout draws from the samples' streams; train the model through training_step, or "
                       "evaluate it in eval mode");
  wanfw::Batch keys;  // the samples' keys alone: drawn on the CPU, as sample_rand always draws
  keys.size = static_cast<std::int64_t>(samples_->ids.size());
  keys.sample_ids = samples_->ids;
  keys.epoch = samples_->epoch;
  keys.seed = samples_->seed;
  const torch::Tensor u = wanfw::sample_rand(keys, "lora_dropout/" + layer, shape);
  return ((u >= p).to(dtype) / (1.0 - p)).to(samples_->device);
}

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
  if (second_.rank > 0) make_second_adapter();
}

void WanLinearImpl::make_adapter() {
  lora_A = register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in_, lora_.rank).bias(false)));
  lora_B = register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(lora_.rank, out_).bias(false)));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(lora_A->weight, std::sqrt(5.0));
  torch::nn::init::zeros_(lora_B->weight);
}

void WanLinearImpl::make_second_adapter() {
  critic_lora_A =
      register_module("critic_lora_A", torch::nn::Linear(torch::nn::LinearOptions(in_, second_.rank).bias(false)));
  critic_lora_B =
      register_module("critic_lora_B", torch::nn::Linear(torch::nn::LinearOptions(second_.rank, out_).bias(false)));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(critic_lora_A->weight, std::sqrt(5.0));
  torch::nn::init::zeros_(critic_lora_B->weight);
}

void WanLinearImpl::attach_second_lora(const LoraShape& shape, torch::Dtype dtype,
                                       std::shared_ptr<const AdapterSelection> selection) {
  if (critic_lora_A) {
    unregister_module("critic_lora_A");
    unregister_module("critic_lora_B");
    critic_lora_A = nullptr;
    critic_lora_B = nullptr;
  }
  second_ = LoraShape{shape.rank, shape.alpha, 0.0};
  selection_ = std::move(selection);
  if (second_.rank == 0) return;
  make_second_adapter();
  critic_lora_A->to(weight.device(), dtype);
  critic_lora_B->to(weight.device(), dtype);
}

void WanLinearImpl::attach_lora(const LoraShape& shape, torch::Dtype dtype, std::string name,
                                std::shared_ptr<const LoraDropoutStreams> streams) {
  name_ = std::move(name);
  streams_ = std::move(streams);
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
  const bool first = lora_.rank > 0 && (!selection_ || selection_->first);
  const bool second = second_.rank > 0 && selection_ && selection_->second;
  if (!first && !second) return y;
  // Under autocast the adapter's matrix products cast their input themselves; without it the
  // input meets the adapter's dtype (float32 adapters over a bfloat16 base). A copy of the
  // activations for nothing costs more than the adapter's own products on a GPU.
  const auto adapter_dtype = (first ? lora_A : critic_lora_A)->weight.scalar_type();
  torch::Tensor h = x;
  if (x.scalar_type() != adapter_dtype && !at::autocast::is_autocast_enabled(x.device().type()))
    h = x.to(adapter_dtype);
  torch::Tensor delta;
  if (first) {
    torch::Tensor input = h;
    if (lora_.dropout > 0 && is_training()) {
      if (!streams_)
        throw wanfw::Error(fmt::format("adapter dropout in {}: the layer has no dropout streams", name_),
                           "attach adapters through wan::attach_adapters, which gives them");
      input = input * streams_->keep_mask(name_, input.sizes().slice(1), lora_.dropout, input.scalar_type());
    }
    delta = adapter_update(input, lora_A, lora_B, lora_);
  }
  if (second) {
    const torch::Tensor more = adapter_update(h, critic_lora_A, critic_lora_B, second_);
    delta = delta.defined() ? delta + more : more;
  }
  return y + (delta.scalar_type() == y.scalar_type() ? delta : delta.to(y.scalar_type()));
}

torch::Tensor WanLinearImpl::adapter_update(const torch::Tensor& h, torch::nn::Linear& a, torch::nn::Linear& b,
                                            const LoraShape& shape) const {
  // alpha / rank applied to the rank-wide intermediate (rank numbers a token, not out).
  const double scale = shape.alpha / static_cast<double>(shape.rank);
  torch::Tensor down = a(h);
  if (scale != 1.0) down = down * scale;
  return b(down);
}

void WanLinearImpl::merge_lora() {
  if (lora_.rank == 0) return;
  {
    torch::NoGradGuard no_grad;
    const double scale = lora_.alpha / static_cast<double>(lora_.rank);
    const torch::Tensor delta = torch::matmul(lora_B->weight.to(torch::kFloat32), lora_A->weight.to(torch::kFloat32));
    weight.copy_(weight.to(torch::kFloat32) + scale * delta.to(weight.device()));
  }
  attach_lora({}, weight.scalar_type());
}

}  // namespace wan
