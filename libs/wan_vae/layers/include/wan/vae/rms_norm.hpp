#pragma once
// The Wan VAE's RMS norm over channels (dim 1): x / max(|x|, 1e-12) * sqrt(C) * gamma, the
// normalisation computed in float32 for 16-bit inputs. `gamma` is [C, 1, 1, 1] for video tensors,
// [C, 1, 1] for the attention's per-frame images.

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace wan {

class VaeRmsNormImpl : public torch::nn::Module {
 public:
  VaeRmsNormImpl(std::int64_t channels, bool images);
  at::Tensor forward(const at::Tensor& x);

  at::Tensor gamma;

 private:
  double scale_;
};
TORCH_MODULE(VaeRmsNorm);

/// SiLU of `x` (a norm's fresh output) in place.
at::Tensor silu_in_place(at::Tensor x);

}  // namespace wan
