// An expert pair's pass in a causal rollout (WanDenoiser::forward with a KV cache): a chunk's step
// on the expert of its level, a made chunk's context pass through both, each expert's blocks over
// their own part of the cache.
#include <torch/torch.h>

#include "wan/causal_attention.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/error.hpp"

namespace wan {

torch::Tensor WanDenoiser::rollout_pass(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                                        const torch::Tensor& y, const torch::Tensor& sigma, const VaceInput& vace,
                                        const CausalPass& causal) {
  if (held_ >= 0)
    throw wanfw::Error(
        "a causal rollout runs both experts (each chunk's steps by level, its context pass through "
        "both), but this process holds one",
        "sample or distill the causal pair on ranks that hold both experts (no network_groups)");
  const auto pass_of = [&](std::size_t expert) {
    CausalPass routed = causal;
    routed.expert = expert;
    return routed;
  };
  if (causal.context) {  // a made chunk into both experts' caches
    const CausalPass high = pass_of(0), low = pass_of(1);
    pair_->high_noise_model->forward(x, t, context, y, vace, &high);
    return pair_->low_noise_model->forward(x, t, context, y, vace, &low);
  }
  // A chunk's step: every sample at the step's level, one expert.
  const std::int64_t high_count = high_noise_samples(sigma).sum().item<std::int64_t>();
  if (high_count != 0 && high_count != x.size(0))
    throw wanfw::Error("a causal rollout's step puts its samples on both sides of the experts' boundary",
                       "give every sample of a rollout the same levels");
  const CausalPass routed = pass_of(high_count == 0 ? 1 : 0);
  return (high_count == 0 ? pair_->low_noise_model : pair_->high_noise_model)->forward(x, t, context, y, vace, &routed);
}

}  // namespace wan
