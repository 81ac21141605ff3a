#pragma once
// A fixed share of each step's samples on each side of the A14B experts' boundary: the training
// timestep distribution conditioned on a side, and which of a step's samples take which side.
//
// A sample at place p of a step of G samples is on the high-noise side when
// floor((p + 1) q + 1/2) - floor(p q + 1/2) = 1: exactly round(q G) of the step's samples, spread
// evenly over its places (so every micro-batch and rank gets its part of either side). Places are
// the same on any layout, so is the side. Its s is then drawn from the sampling's distribution
// restricted to that side: the uniform draw of its "timestep" stream carried into the side's part
// of [0, 1) and through the distribution's inverse.

#include <torch/types.h>

#include "wan/flow_matching.hpp"
#include "wanfw/data.hpp"

namespace wan {

/// [B] bool: the samples of `batch` (a training batch: Batch::step_positions) on the high-noise
/// side for a share `share` of each step. Throws wanfw::Error for a batch without step places.
torch::Tensor high_noise_places(const wanfw::Batch& batch, double share);

/// The probability that `sampling` draws s below `sigma`.
double probability_below(const TimestepSampling& sampling, double sigma);

/// Each sample's s [B] (float32), drawn from `sampling` restricted to s >= `boundary` where
/// `high` [B] is true and to s < `boundary` elsewhere; the float32 values route alike
/// (WanDenoiser::high_noise_samples). `sampling` must not be fixed. With `levels` > 0, that many
/// a sample, all on its side (a causal student's chunks): [B, levels].
torch::Tensor draw_sigma_on_sides(const wanfw::Batch& batch, const TimestepSampling& sampling, double boundary,
                                  const torch::Tensor& high, std::int64_t levels = 0);

}  // namespace wan
