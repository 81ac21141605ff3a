#pragma once
// A causal (streaming) generator under objective dmd, Self Forcing's recipe: G makes each sample's
// video chunk by chunk with its KV cache, as it will stream, and trains on that self-rollout.
//
//   e          one exit step an optimizer step, uniform over G's steps (wanfw::step_rand): every
//              rank and micro-batch runs the same passes, and a layout never changes it
//   chunk k    G's steps from the chunk's noise to step e without autograd, fresh noise between
//              them; step e's estimate, with its graph, is the chunk; then the chunk's context pass
//   x          the chunks in a row: G's sample, scored whole by the bidirectional critic and teacher
//
// The gradient reaches each chunk's exit forward alone (wan::causal_rollout): earlier steps run
// without autograd and later chunks read the cache's values. Every draw (a chunk's noise, the fresh
// noise of each step) comes from the sample's own streams.

#include <cstddef>
#include <string_view>

#include "distill_settings.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/data.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// Refuses, naming the option, what a causal generator does not do (yet): another objective or
/// inputs, both experts, an image-conditioned task, a regression term, chunked recompute, a latent
/// size whose frames do not cut into chunks.
void refuse_what_a_causal_generator_cannot_do(const wanfw::Options& o, const DistillSettings& s, wan::Expert expert);

/// The exit step of an optimizer step's rollouts (0 .. steps - 1), drawn from `stream`.
std::size_t exit_step(const wanfw::Batch& batch, std::size_t steps, std::string_view stream);

}  // namespace wan_distill
