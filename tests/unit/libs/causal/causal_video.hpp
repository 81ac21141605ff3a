#pragma once
// What the causal DiT's unit tests share (test_causal_dit.cpp, test_causal_checkpoint.cpp): a
// rollout's latents, a chunk's frames and noisy timestep, the tolerance of two paths that sum the
// same attention terms in another order, and a DiT's gradients.

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "wan/wan_dit.hpp"

namespace wanfw::testing::causal {

constexpr std::int64_t kChunk = 2, kChunks = 4, kFrames = kChunk * kChunks;

/// A rollout's latents: [1, in_dim, frames, 4, 4] (4 tokens a frame), clean and noisy, and a text.
struct Video {
  torch::Tensor clean, noisy, context;
};

inline Video video(const wan::WanConfig& c) {
  torch::manual_seed(11);
  return {torch::randn({1, c.in_dim, kFrames, 4, 4}), torch::randn({1, c.in_dim, kFrames, 4, 4}),
          torch::randn({1, 5, c.text_dim})};
}

inline torch::Tensor frames(const torch::Tensor& x, std::int64_t first, std::int64_t count) {
  return x.narrow(2, first, count);
}

/// Chunk k's noisy timestep (one a frame, equal within the chunk).
inline double noisy_t(std::int64_t k) { return 900.0 - 150.0 * static_cast<double>(k); }

/// The largest difference of `a` from `b`, relative to b's largest value.
inline double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

/// Every parameter's gradient of `dit` from the loss `loss` returns (the gradients zeroed first).
inline std::vector<torch::Tensor> gradients(wan::WanDiT& dit, const std::function<torch::Tensor()>& loss) {
  dit->zero_grad();
  loss().backward();
  std::vector<torch::Tensor> out;
  for (const auto& p : dit->parameters()) out.push_back(p.grad().clone());
  return out;
}

// Two paths that run the same operations on the same values but sum attention's terms (or a
// parameter's gradient over the chunks) in another order: a few float32 ulps (2^-24 relative),
// which the fp32 norms, modulation and two blocks carry through; 1e-5 leaves two orders of
// magnitude above that.
constexpr double kTolerance = 1e-5;

}  // namespace wanfw::testing::causal
