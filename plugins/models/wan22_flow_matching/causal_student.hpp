#pragma once
// The wan22_flow_matching model as a causal (streaming) student (model.causal.frames_per_chunk):
// trained with the teacher-forcing objective, sampled chunk by chunk with a KV cache.

#include <cstdint>
#include <functional>

#include <torch/types.h>

#include "wan/wan_denoiser.hpp"
#include "wanfw/data.hpp"
#include "wanfw/options.hpp"
#include "wanfw/plugin.hpp"

namespace wan_fm {

struct FlowMatchingSettings;

/// `causal.training` (teacher_forcing | ode_pairs) and `sample_trajectory_steps`.
std::vector<wanfw::OptionSpec> causal_training_options();
/// Those options read into `s` (ode_pairs, trajectory_steps) and checked against its causal layout.
void causal_training_from(const wanfw::Options& o, FlowMatchingSettings& s);

/// The layout the memory plan counts: a causal student's teacher-forcing step runs [clean | noisy]
/// copies of the latents' frames, twice the tokens (the regression on ODE pairs runs them once).
/// The largest bucket's frames must cut into its chunks (`validate` says so before a run; every
/// bucket is checked at its first batch).
wanfw::TrainingLayout causal_training_layout(const wanfw::Options& o, const FlowMatchingSettings& s,
                                             wanfw::TrainingLayout layout);

/// The fields a causal student's ODE pairs add: `trajectory` [K, C, F, H, W], the teacher's states at
/// the student's K levels, and `trajectory_timesteps` [K]; `latents` is the teacher's final sample.
std::vector<wanfw::FieldSpec> ode_pair_fields(const FlowMatchingSettings& settings, std::int64_t channels);

/// Each chunk's state of the teacher's trajectory for the regression: [B, chunks] indices into its
/// K levels, from the sample's "ode_step" stream. For an expert pair, a sample's chunks are all on
/// one expert's side (its levels at or above the boundary, or below): the side from high_noise.share
/// or the sample's "expert_side" stream (high with the share of the levels that are).
torch::Tensor draw_ode_steps(const wanfw::Batch& batch, const FlowMatchingSettings& settings, std::int64_t chunks);

/// The causal regression on a teacher's ODE pairs: each chunk of the teacher's trajectory
/// [B, K, C, F, H, W] taken at its own step (`chunk_step` [B, chunks], indices into K), one full
/// block-causal forward, and the error of the x0 estimate x - s v against the teacher's final
/// sample `x0`: [B] a sample. Throws wanfw::Error when the pairs' `timesteps` [B, K] are not the
/// student's levels.
torch::Tensor causal_ode_error(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings,
                               const torch::Tensor& trajectory, const torch::Tensor& timesteps, const torch::Tensor& x0,
                               const torch::Tensor& chunk_step, const torch::Tensor& context);

/// The teacher-forcing objective: each chunk of the clean latents `x0` [B, C, F, H, W] noised at its
/// own level (`chunk_sigma` [B, chunks]) with `noise`, one forward over [x0 | the
/// noised frames] (each noisy chunk attends to itself and to the clean chunks before it, as a
/// rollout's chunk to its cache) and the flow-matching error of the noisy half: [B] a sample.
torch::Tensor causal_error(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings, const torch::Tensor& x0,
                           const torch::Tensor& noise, const torch::Tensor& chunk_sigma, const torch::Tensor& context);

/// The chunks of latents of `frames` latent frames; throws naming the option when they do not divide.
std::int64_t causal_chunks(const FlowMatchingSettings& settings, std::int64_t frames, const char* what);

/// The video a causal student makes chunk by chunk from `context` [B, L, text_dim] (no guidance:
/// the student answers alone), as many latent frames as `shape` [B, C, F, H, W] has: [B, C, F, H, W].
/// For ti2v, `image` [B, C, H, W] is latent frame 0, passed into the cache first (i2v from a first
/// frame). `made` (if set) sees each chunk's latents on the CPU as it is made, the image's first.
torch::Tensor causal_draw(wan::WanDenoiser& denoiser, const FlowMatchingSettings& settings,
                          const torch::Tensor& context, const torch::Tensor& image, at::IntArrayRef shape,
                          std::uint64_t seed, const torch::Device& device,
                          const std::function<void(const at::Tensor&)>& made = {});

}  // namespace wan_fm
