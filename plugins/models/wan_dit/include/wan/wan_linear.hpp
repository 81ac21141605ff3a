#pragma once
// The Wan DiT's adaptable linear layers (attention projections and feed-forward): a linear map
// under the official parameter names (`weight` [out, in], `bias` [out]) that can carry a low-rank
// adapter (LoRA): y = x W^T + b + (alpha / rank) * dropout(x) A^T B^T, with `lora_A.weight`
// [rank, in] and `lora_B.weight` [out, rank] — the names the Wan / ComfyUI and PEFT adapter files
// use below the layer's own name.

#include <cstdint>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>

namespace wan {

/// A low-rank adapter's shape and scale.
struct LoraShape {
  std::int64_t rank = 0;  ///< 0: no adapter
  double alpha = 0;       ///< the update is scaled by alpha / rank
  /// On the adapter's input, while training. Its draws come from the default generator, not from
  /// the samples' streams: a run with dropout does not give the same update on every layout.
  double dropout = 0;
};

class WanLinearImpl : public torch::nn::Cloneable<WanLinearImpl> {
 public:
  WanLinearImpl(std::int64_t in, std::int64_t out);
  /// Registers weight and bias (initialised as torch::nn::Linear does) and, when one is attached, the
  /// adapter (A: PEFT's default initialisation, Kaiming-uniform with a = sqrt(5); B: zeros, so a new
  /// adapter changes nothing).
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  /// Attaches a new adapter (replacing one attached before), on the layer's device, in `dtype`.
  void attach_lora(const LoraShape& shape, torch::Dtype dtype);
  bool has_lora() const { return lora_.rank > 0; }
  const LoraShape& lora() const { return lora_; }
  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

  torch::Tensor weight, bias;
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};

 private:
  void make_adapter();
  std::int64_t in_, out_;
  LoraShape lora_;
};
TORCH_MODULE(WanLinear);

}  // namespace wan
