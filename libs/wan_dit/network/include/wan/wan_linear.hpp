#pragma once
// The Wan DiT's adaptable linear layers (attention projections and feed-forward): a linear map
// under the official parameter names (`weight` [out, in], `bias` [out]) that can carry a low-rank
// adapter (LoRA): y = x W^T + b + (alpha / rank) * dropout(x) A^T B^T, with `lora_A.weight`
// [rank, in] and `lora_B.weight` [out, rank] — the names the Wan / ComfyUI and PEFT adapter files
// use below the layer's own name.
//
// A frozen base can live in float8 e4m3 (quantize_base, or set_fp8_base for a weight read from an
// fp8 file): `weight` then holds the fp8 values and `weight_scale` their float32 scales
// (wan/fp8_weight.hpp), both frozen, and every product dequantizes the weight for its own use.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>

#include "wan/fp8_weight.hpp"
#include "wanfw/data.hpp"

namespace wan {

/// A low-rank adapter's shape and scale.
struct LoraShape {
  std::int64_t rank = 0;  ///< 0: no adapter
  double alpha = 0;       ///< the update is scaled by alpha / rank
  double dropout = 0;     ///< on the adapter's input, while training (see LoraDropoutStreams)
};

/// Where adapter dropout draws come from during one training forward: the streams of the samples
/// the forward holds, one stream a layer ("lora_dropout/<layer name>"), so a sample's masks do not
/// depend on the rank, micro-batch or expert split that holds it, and a recomputed block
/// (gradient checkpointing) draws the masks it drew the first time. The model sets the samples
/// before a training forward and clears them after; one instance serves the layers of one DiT.
class LoraDropoutStreams {
 public:
  /// The keys of the samples a forward holds, in batch order.
  struct Samples {
    std::vector<std::int64_t> ids;
    std::int64_t epoch = 0;
    std::uint64_t seed = 0;
    c10::Device device = c10::kCPU;
  };
  static Samples samples_of(const wanfw::Batch& batch);
  void set(std::optional<Samples> samples) { samples_ = std::move(samples); }
  const std::optional<Samples>& samples() const { return samples_; }
  /// Keep-masks scaled by 1 / (1 - p): [B, *shape] in `dtype` on the samples' device. Throws when
  /// no samples are set (a training forward outside training_step).
  torch::Tensor keep_mask(const std::string& layer, at::IntArrayRef shape, double p, torch::Dtype dtype) const;

  /// Tokens `offset` .. `offset` + shape[0] of sequences of `total` tokens: what a block recomputed
  /// in chunks of tokens runs its layers on. While set, keep_mask draws each sample's masks for the
  /// whole sequence (on the host) and gives the chunk's rows, the masks of the unchunked forward.
  struct Rows {
    std::int64_t offset = 0, total = 0;
  };
  void set_rows(std::optional<Rows> rows) { rows_ = rows; }

 private:
  std::optional<Samples> samples_;
  std::optional<Rows> rows_;
};

/// Which adapters a DiT's layers add in their forward (one selection shared by the layers of a
/// DiT): the first adapter (`lora_A`/`lora_B`), the second (`critic_lora_A`/`critic_lora_B`, a DMD
/// critic's on the same frozen base), both, or neither (the frozen base alone: the teacher).
struct AdapterSelection {
  bool first = true;
  bool second = false;
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
  /// `name` (the layer's module name) keys its dropout stream; `streams` gives the draws.
  void attach_lora(const LoraShape& shape, torch::Dtype dtype, std::string name = "",
                   std::shared_ptr<const LoraDropoutStreams> streams = nullptr);
  /// Points the adapter's dropout at other streams (a replica gets its own).
  void set_dropout_streams(std::shared_ptr<const LoraDropoutStreams> streams) { streams_ = std::move(streams); }
  /// Folds the adapter into the weight (W += scale * B A, in float32, stored in W's dtype) and
  /// removes it. An fp8 base is dequantized first and the merged weight is stored in the bias's
  /// dtype (the compute dtype): a merged model is a plain model.
  void merge_lora();
  /// Adds `delta` ([out, in], float32) to the frozen base, in float32: stored in the weight's
  /// dtype, or, for an fp8 base, quantized again (quantize_fp8 of the sum).
  void add_to_base(const torch::Tensor& delta);
  /// Copies the frozen base of `from` (same shape) into this layer, each in its own storage: fp8
  /// values and scales as they are when both are fp8, quantized when only this layer is,
  /// dequantized when only `from` is; the bias too.
  void copy_base_from(const WanLinearImpl& from);
  /// Stores the weight in float8 e4m3 with float32 scales (quantize_fp8) and freezes it.
  void quantize_base();
  /// Replaces the weight with `weight` (fp8 values and scales, e.g. read from an fp8 file), moved
  /// to the layer's device; the layer's base is fp8 from then on. Throws wanfw::Error when the
  /// values' shape is not [out, in].
  void set_fp8_base(Fp8Weight weight);
  bool fp8_base() const { return fp8_; }
  /// The fp8 weight (values and scales, not copies); only with fp8_base().
  Fp8Weight fp8_weight() const;
  /// As Module::to, except that an fp8 base and its scales keep their dtypes (they move between devices only).
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;
  bool has_lora() const { return lora_.rank > 0; }
  const LoraShape& lora() const { return lora_; }
  /// Attaches a second adapter (a DMD critic's, without dropout) beside the first, under
  /// `critic_lora_A`/`critic_lora_B`; `selection` says which of the two the forward adds.
  void attach_second_lora(const LoraShape& shape, torch::Dtype dtype,
                          std::shared_ptr<const AdapterSelection> selection);
  /// Points the layer at another selection (a replica gets its own).
  void set_adapter_selection(std::shared_ptr<const AdapterSelection> selection) { selection_ = std::move(selection); }
  bool has_second_lora() const { return second_.rank > 0; }
  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

  torch::Tensor weight, bias;
  torch::Tensor weight_scale;  ///< with an fp8 base: the weight's scales (float32), else undefined
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};
  torch::nn::Linear critic_lora_A{nullptr}, critic_lora_B{nullptr};

 private:
  void make_adapter();
  void make_second_adapter();
  /// One adapter's update of `x` (the layer's input, already in the adapter's dtype).
  torch::Tensor adapter_update(const torch::Tensor& h, torch::nn::Linear& a, torch::nn::Linear& b,
                               const LoraShape& shape) const;
  void move(const std::optional<torch::Device>& device, const std::optional<torch::Dtype>& dtype, bool non_blocking);
  std::int64_t in_, out_;
  bool fp8_ = false;
  Fp8Scaling scaling_ = Fp8Scaling::PerTensor;
  LoraShape lora_;
  LoraShape second_;
  std::shared_ptr<const AdapterSelection> selection_;
  std::string name_;
  std::shared_ptr<const LoraDropoutStreams> streams_;
};
TORCH_MODULE(WanLinear);

}  // namespace wan
