#pragma once
// The wan22_flow_matching model as a causal (streaming) student (model.causal.frames_per_chunk):
// trained with the teacher-forcing objective, sampled chunk by chunk with a KV cache.

#include <cstdint>

#include <torch/types.h>

#include "wan/wan_denoiser.hpp"
#include "wanfw/data.hpp"

namespace wan_fm {

struct FlowMatchingSettings;

/// The teacher-forcing objective: each chunk of the clean latents `x0` [B, C, F, H, W] noised at its
/// own level (`chunk_sigma` [B, F / frames_per_chunk]) with `noise`, one forward over [x0 | the
/// noised frames] (each noisy chunk attends to itself and to the clean chunks before it, as a
/// rollout's chunk to its cache) and the flow-matching error of the noisy half: [B] a sample.
torch::Tensor causal_error(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings, const torch::Tensor& x0,
                           const torch::Tensor& noise, const torch::Tensor& chunk_sigma, const torch::Tensor& context);

/// The chunks of latents of `frames` latent frames; throws naming the option when they do not divide.
std::int64_t causal_chunks(const FlowMatchingSettings& settings, std::int64_t frames, const char* what);

/// The video a causal student makes chunk by chunk from `context` [B, L, text_dim] (no guidance:
/// the student answers alone), as many latent frames as `shape` [B, C, F, H, W] has: [B, C, F, H, W].
torch::Tensor causal_draw(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings,
                          const torch::Tensor& context, at::IntArrayRef shape, std::uint64_t seed,
                          const torch::Device& device);

}  // namespace wan_fm
