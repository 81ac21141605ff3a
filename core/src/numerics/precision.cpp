#include "wanfw/precision.hpp"

#include <map>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wanfw {

PrecisionMode parse_precision(const std::string& name) {
  if (name == "fp32") return PrecisionMode::FP32;
  if (name == "bf16") return PrecisionMode::BF16;
  if (name == "fp16") return PrecisionMode::FP16;
  if (name == "bf16_weights") return PrecisionMode::BF16Weights;
  throw Error(fmt::format("unknown precision '{}'", name), "use fp32, bf16, bf16_weights or fp16");
}

const char* precision_name(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::BF16: return "bf16";
    case PrecisionMode::FP16: return "fp16";
    case PrecisionMode::BF16Weights: return "bf16_weights";
    default: return "fp32";
  }
}

Precision::Precision(PrecisionOptions options) : options_(options) { scaler_.scale = options_.init_scale; }

Precision::AutocastScope::AutocastScope(const Precision& precision, c10::Device device) {
  if (precision.mode() == PrecisionMode::FP32) return;
  device_type_ = device.type();
  was_enabled_ = at::autocast::is_autocast_enabled(*device_type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(*device_type_);
  at::autocast::set_autocast_dtype(*device_type_,
                                   precision.mode() == PrecisionMode::FP16 ? at::kHalf : at::kBFloat16);
  at::autocast::set_autocast_enabled(*device_type_, true);
  at::autocast::increment_nesting();
}

Precision::AutocastScope::~AutocastScope() {
  if (!device_type_) return;
  at::autocast::set_autocast_enabled(*device_type_, was_enabled_);
  at::autocast::set_autocast_dtype(*device_type_, previous_dtype_);
  // Casts are cached inside one autocast region only; the cache must not outlive it.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

at::Tensor Precision::scale(const at::Tensor& loss) const {
  return scales_loss() ? loss * scaler_.scale : loss;
}

bool Precision::unscale_and_check(const std::vector<at::Tensor>& parameters) {
  if (!scales_loss()) return false;
  // The fused kernel wants one device and dtype per call: group the gradients.
  std::map<std::pair<std::string, at::ScalarType>, std::vector<at::Tensor>> groups;
  for (const auto& p : parameters)
    if (p.grad().defined()) groups[{p.grad().device().str(), p.grad().scalar_type()}].push_back(p.grad());
  bool found = false;
  for (auto& [key, grads] : groups) {
    const auto options = grads.front().options().dtype(at::kFloat);
    at::Tensor found_inf = at::zeros({1}, options);
    const at::Tensor inverse = at::full({1}, 1.0 / scaler_.scale, options);
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inverse);
    found = found || found_inf.item<float>() > 0;
  }
  return found;
}

void Precision::update(bool found_inf) {
  if (!scales_loss()) return;
  if (found_inf) {
    scaler_.scale *= options_.backoff_factor;
    scaler_.growth_tracker = 0;
  } else if (++scaler_.growth_tracker >= options_.growth_interval) {
    scaler_.scale *= options_.growth_factor;
    scaler_.growth_tracker = 0;
  }
}

}  // namespace wanfw
