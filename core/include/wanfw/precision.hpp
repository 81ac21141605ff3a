#pragma once
// Numeric precision of training, shared by every strategy: fp32; bf16 (autocast); bf16_weights
// (autocast over bf16 trainable weights, fp32 master weights in the optimizer); fp16 (autocast plus
// a dynamic loss scaler that skips steps whose gradients overflow).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace wanfw {

enum class PrecisionMode { FP32, BF16, FP16, BF16Weights };
PrecisionMode parse_precision(const std::string& name);
const char* precision_name(PrecisionMode mode);

/// The dynamic loss scaler's settings and state (as torch.amp.GradScaler keeps them).
struct LossScalerState {
  double scale = 65536.0;
  std::int64_t growth_tracker = 0;  ///< overflow-free steps since the scale last changed
};

struct PrecisionOptions {
  PrecisionMode mode = PrecisionMode::FP32;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

class Precision {
 public:
  explicit Precision(PrecisionOptions options = {});

  PrecisionMode mode() const { return options_.mode; }
  bool scales_loss() const { return options_.mode == PrecisionMode::FP16; }

  /// Enables autocast (bf16 or fp16) on `device`'s type for its lifetime; does nothing in fp32.
  class AutocastScope {
   public:
    AutocastScope(const Precision& precision, c10::Device device);
    ~AutocastScope();
    AutocastScope(const AutocastScope&) = delete;
    AutocastScope& operator=(const AutocastScope&) = delete;

   private:
    std::optional<c10::DeviceType> device_type_;
    bool was_enabled_ = false;
    at::ScalarType previous_dtype_ = at::kFloat;
  };

  /// The loss to call backward on: multiplied by the current scale in fp16.
  at::Tensor scale(const at::Tensor& loss) const;
  /// fp16: divides the gradients by the scale in place and reports whether any is inf or NaN
  /// (the step must then be skipped). Other modes: false, gradients untouched.
  bool unscale_and_check(const std::vector<at::Tensor>& parameters);
  /// fp16: after a step, backs the scale off on overflow or grows it after `growth_interval`
  /// clean steps.
  void update(bool found_inf);

  const LossScalerState& scaler() const { return scaler_; }
  void restore(const LossScalerState& state) { scaler_ = state; }

 private:
  PrecisionOptions options_;
  LossScalerState scaler_;
};

}  // namespace wanfw
