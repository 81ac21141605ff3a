#pragma once
// The streaming sampler of a causal student: a video made chunk by chunk, each chunk in a few steps
// from its own noise (the clean estimate re-noised with fresh noise between steps), then passed
// once more at the context timestep so that the KV cache holds its clean keys and values for the
// chunks after it. A chunk's frames are final as soon as it is made, whatever follows.
//
//   x0 = x_t - s v(x_t, t),  x_{t'} = (1 - s') x0 + s' eps',  s = t / 1000

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/types.h>

#include "wan/causal_attention.hpp"
#include "wan/wan_denoiser.hpp"

namespace wan {

/// The few-step student's timesteps: `steps` (on 0..1000, descending) warped by the schedule's
/// shift, 1000 shifted(s / 1000): [1000, 750, 500, 250] at shift 5 gives [1000, 937.5, 833.3, 625].
std::vector<double> warped_timesteps(const std::vector<double>& steps, double shift);

struct CausalSampling {
  std::vector<double> timesteps = {1000, 937.5, 833.3333333333334, 625};  ///< each chunk's steps
  double context_timestep = 0;  ///< the clean chunk's pass that fills the cache
  std::int64_t chunks = 1;      ///< the video's chunks, given ones included
  /// Latents [B, C, n, H, W] given for the first chunks (n frames of whole chunks: i2v's image as
  /// frame 0 with CausalLayout::independent_first_frame, or a video to continue): each passes at
  /// the context timestep into the cache and is the output's as it is; the chunks after it are made.
  torch::Tensor initial = {};
};

/// The velocity for latents `x` [B, C, f, H, W] at timesteps `t` [B, f] (one a frame) in a causal
/// pass (`pass`: the rollout's cache, the latents' first frame).
using CausalVelocity = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& t,
                                                   const CausalPass& pass)>;

/// The noise of chunk `chunk` at step `step` (0: its starting noise; j > 0: the fresh noise that
/// re-noises step j - 1's estimate), float32 [shape] on the CPU: a pure function of the seed, the
/// chunk and the step, so a chunk's draws do not depend on how many chunks are made.
torch::Tensor chunk_noise(std::uint64_t seed, std::int64_t chunk, std::int64_t step, at::IntArrayRef shape);

/// The noise of chunk `chunk` at step `step` (as chunk_noise numbers them) for a rollout: [B, C, f,
/// H, W] on the rollout's device.
using ChunkNoise = std::function<torch::Tensor(std::int64_t chunk, std::int64_t step)>;

/// The self-rollout a causal student trains on: each chunk takes the sampler's steps up to and
/// including `exit_step` (its estimate there is the chunk), then its context pass. Only the exit
/// step's forward runs under the caller's grad mode; every other pass runs without autograd, and
/// the cache holds values only, so a gradient of the result reaches each chunk's exit forward
/// alone, never an earlier step or chunk. Returns the video [B, C, F, H, W] in float32.
torch::Tensor causal_rollout(const CausalVelocity& velocity, KvCache& cache, const ChunkNoise& noise,
                             const CausalSampling& sampling, std::size_t exit_step,
                             const std::function<void(std::int64_t, const torch::Tensor&)>& made = {});

/// Makes `sampling.chunks` chunks (CausalLayout::chunk_frames latent frames each) of frames of
/// `shape` [B, C, H, W], in float32 on `device`; `made(k, chunk)` sees each chunk [B, C, f, H, W] as it
/// is made (to decode and write it while the next is made). Returns the whole video's latents.
torch::Tensor causal_sample(const CausalVelocity& velocity, KvCache& cache, at::IntArrayRef shape,
                            const CausalSampling& sampling, std::uint64_t seed, const torch::Device& device,
                            const std::function<void(std::int64_t, const torch::Tensor&)>& made = {});

/// A cache of `layout` for `denoiser`'s blocks (an expert pair's: both experts') over latent frames
/// of height x width.
KvCache rollout_cache(const WanDenoiser& denoiser, const CausalLayout& layout, std::int64_t height,
                      std::int64_t width);

/// causal_sample for `denoiser`'s latents of `shape` [B, C, F, H, W] (F whole chunks):
/// its cache made here, `made` (if set) seeing each chunk on the CPU as it is made.
torch::Tensor stream_sample(const CausalVelocity& velocity, const WanDenoiser& denoiser, const CausalLayout& layout,
                            at::IntArrayRef shape, const CausalSampling& sampling, std::uint64_t seed,
                            const torch::Device& device, const std::function<void(const at::Tensor&)>& made = {});

}  // namespace wan
