#pragma once
// What a distillation's steps hold, as the memory plan's run (wan/memory_estimate.hpp): the student
// (dmd's generator), a dmd critic (its adapters on the shared base, or a network of its own) and
// the frozen teacher where it computes beside the student.

#include "distill_options.hpp"
#include "wan/memory_estimate.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// The plan's run: every network a step of the configured objective holds, and a causal generator's
/// KV cache for `layout`'s latents and batch.
wan::PlannedRun planned_run(const wanfw::Options& o, const Networks& n, const DistillSettings& s,
                            const wanfw::TrainingLayout& layout);

/// `layout` with the latents of a data-free run (latent_size), or latent_size where the data name no bucket.
wanfw::TrainingLayout planned_layout(wanfw::TrainingLayout layout, const DistillSettings& s);

}  // namespace wan_distill
