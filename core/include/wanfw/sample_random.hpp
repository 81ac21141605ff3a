#pragma once
// Random draws keyed by sample. What a model draws for a sample (flow-matching noise and
// timestep, conditioning dropout, ...) comes from a generator seeded by (the batch's seed, the
// sample's id, the epoch, a stream name), never from the process's default generator. So where a
// sample is processed (which rank, micro-batch or replica) never changes what is drawn for it:
// N ranks x B, K micro-batches and one batch of N·B·K compute the same thing.
//
//   const at::Tensor noise = wanfw::sample_randn(batch, "noise", x0.sizes().slice(1));
//   const at::Tensor u = wanfw::sample_rand(batch, "timestep");  // [B]
//
// Each stream gives one draw per sample: use a new name for every draw. Draws are made on the CPU
// (so CPU and GPU runs draw the same numbers) and moved to the batch's device.

#include <cstdint>
#include <string_view>

#include <ATen/core/Tensor.h>

#include "wanfw/data.hpp"

namespace wanfw {

/// SplitMix64: spreads nearby inputs ((seed, index) pairs) over the whole 64-bit range. For
/// seeds of one's own derived from a run's seed (a data set's per-sample content, say).
std::uint64_t mix_seed(std::uint64_t x);

/// The seed of one sample's stream: a pure function of its four keys.
std::uint64_t sample_stream_seed(std::uint64_t seed, std::int64_t sample_id, std::int64_t epoch,
                                 std::string_view stream);

/// Standard normal draws, [B, *shape], one independent stream per sample of `batch`, on the
/// batch's device in `dtype` (drawn in fp32). Throws wanfw::Error when the batch carries no
/// sample ids (a batch built by hand: set Batch::sample_ids).
at::Tensor sample_randn(const Batch& batch, std::string_view stream, at::IntArrayRef shape = {},
                        at::ScalarType dtype = at::kFloat);
/// Uniform draws in [0, 1), like sample_randn.
at::Tensor sample_rand(const Batch& batch, std::string_view stream, at::IntArrayRef shape = {},
                       at::ScalarType dtype = at::kFloat);

/// One uniform draw in [0, 1) for the whole optimizer step (Batch::step, epoch and seed): the same
/// on every rank and micro-batch of the step, so a choice made with it (how many passes a step
/// runs) is made alike everywhere and on any layout. Validation batches (step -1) repeat theirs.
double step_rand(const Batch& batch, std::string_view stream);

}  // namespace wanfw
