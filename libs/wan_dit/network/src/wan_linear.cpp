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
  // A chunk of a sequence draws the whole sequence's masks (on the host) and keeps its rows.
  std::vector<std::int64_t> drawn(shape.begin(), shape.end());
  if (rows_) drawn.at(0) = rows_->total;
  torch::Tensor u = wanfw::sample_rand(keys, "lora_dropout/" + layer, drawn);
  if (rows_) u = u.narrow(1, rows_->offset, shape[0]);
  return ((u >= p).to(dtype) / (1.0 - p)).to(samples_->device);
}

WanLinearImpl::WanLinearImpl(std::int64_t in, std::int64_t out) : in_(in), out_(out) { reset(); }

void WanLinearImpl::reset() {
  // An fp8 base is frozen: a replica (Cloneable::clone resets, then copies the values in) too.
  weight = register_parameter("weight", torch::empty({out_, in_}), /*requires_grad=*/!fp8_);
  bias = register_parameter("bias", torch::empty({out_}));
  if (fp8_) weight_scale = register_parameter("weight_scale", torch::ones({1}), /*requires_grad=*/false);
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
  torch::Tensor y = fp8_ ? fp8_linear(x, fp8_weight(), bias) : torch::nn::functional::linear(x, weight, bias);
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
    const torch::Tensor base = fp8_ ? dequantize_fp8(fp8_weight(), torch::kFloat32) : weight.to(torch::kFloat32);
    const torch::Tensor merged = base + scale * delta.to(weight.device());
    if (fp8_) {
      weight.set_data(merged.to(bias.scalar_type()));
      parameters_.erase("weight_scale");
      weight_scale = torch::Tensor();
      fp8_ = false;
    } else {
      weight.copy_(merged);
    }
  }
  attach_lora({}, weight.scalar_type());
}

void WanLinearImpl::add_to_base(const torch::Tensor& delta) {
  torch::NoGradGuard no_grad;
  const torch::Tensor d = delta.to(weight.device(), torch::kFloat32);
  if (fp8_) set_fp8_base(quantize_fp8(dequantize_fp8(fp8_weight(), torch::kFloat32) + d));
  else weight.copy_(weight.to(torch::kFloat32) + d);
}

void WanLinearImpl::copy_base_from(const WanLinearImpl& from) {
  torch::NoGradGuard no_grad;
  if (from.fp8_) {
    const Fp8Weight w = from.fp8_weight();
    if (fp8_) set_fp8_base({w.values.clone(), w.scales.clone(), w.scaling});
    else weight.copy_(dequantize_fp8(w, torch::kFloat32));
  } else if (fp8_) {
    set_fp8_base(quantize_fp8(from.weight));
  } else {
    weight.copy_(from.weight);
  }
  bias.copy_(from.bias);
}

void WanLinearImpl::quantize_base() {
  if (fp8_) return;
  set_fp8_base(quantize_fp8(weight.detach()));
}

void WanLinearImpl::set_fp8_base(Fp8Weight w) {
  if (w.values.sizes() != weight.sizes())
    throw wanfw::Error(fmt::format("an fp8 weight of shape {} for a layer of shape [{}, {}]", c10::str(w.values.sizes()),
                                   out_, in_));
  torch::NoGradGuard no_grad;
  weight.set_data(w.values.to(weight.device()));
  weight.set_requires_grad(false);
  const torch::Tensor scales = w.scales.to(weight.device(), torch::kFloat32);
  if (!fp8_) weight_scale = register_parameter("weight_scale", scales, /*requires_grad=*/false);
  else weight_scale.set_data(scales);
  scaling_ = w.scaling;
  fp8_ = true;
}

Fp8Weight WanLinearImpl::fp8_weight() const {
  if (!fp8_) throw wanfw::Error("fp8_weight() of a layer whose base is not fp8");
  return {weight, weight_scale, scaling_};
}

void WanLinearImpl::move(const std::optional<torch::Device>& device, const std::optional<torch::Dtype>& dtype,
                         bool non_blocking) {
  for (auto& child : children()) {
    if (device && dtype) child->to(*device, *dtype, non_blocking);
    else if (device) child->to(*device, non_blocking);
    else child->to(*dtype, non_blocking);
  }
  const auto moved = [&](torch::Tensor& t, bool cast) {
    t.set_data(t.to(device.value_or(t.device()), cast && dtype ? *dtype : t.scalar_type(), non_blocking));
  };
  moved(bias, true);
  moved(weight, !fp8_);
  if (fp8_) moved(weight_scale, false);
}

void WanLinearImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  move(device, dtype, non_blocking);
}

void WanLinearImpl::to(torch::Dtype dtype, bool non_blocking) { move(std::nullopt, dtype, non_blocking); }

void WanLinearImpl::to(torch::Device device, bool non_blocking) { move(device, std::nullopt, non_blocking); }

}  // namespace wan
