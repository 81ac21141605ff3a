#pragma once
// What a distillation's steps hold, as the memory plan's run (wan/memory_plan.hpp): the student
// (dmd's generator), a dmd critic (its adapters on the shared base, or a network of its own) and
// the frozen teacher where it computes beside the student.

#include <optional>

#include "distill_options.hpp"
#include "wan/memory_plan.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// The plan's run for a student that trains adapters; none for one trained whole (the plan is
/// for adapters on a frozen base).
std::optional<wan::PlannedRun> planned_run(const wanfw::Options& o, const Networks& n, const DistillSettings& s);

/// `layout` with the latents of a data-free run (latent_size) where the data name no bucket.
wanfw::TrainingLayout planned_layout(wanfw::TrainingLayout layout, const DistillSettings& s);

}  // namespace wan_distill
