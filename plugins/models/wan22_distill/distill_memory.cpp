#include "distill_memory.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "dmd/dmd_schema.hpp"
#include "wan/lora.hpp"

namespace wan_distill {

namespace {

/// A causal generator's rollout (dmd/causal_rollout.hpp): its KV cache, and without gradient
/// checkpointing the keys and values each chunk's exit pass keeps for backward beyond what one
/// forward over the video keeps (chunk k attends over the frames before it too).
void add_rollout(wan::PlannedRun& run, const wanfw::Options& o, const Networks& n, const DistillSettings& s,
                 const wanfw::TrainingLayout& layout) {
  if (!s.causal.enabled() || layout.latent.size() != 3) return;
  const wan::CausalLayout& causal = *s.causal.layout;
  const wan::WanConfig& c = n.student;
  const std::int64_t frames = layout.latent[0];
  const std::int64_t tokens = (layout.latent[1] / c.patch[1]) * (layout.latent[2] / c.patch[2]);
  // The keys and values in what the blocks compute in: bf16 weights, or precision.mode's autocast.
  const double value = o.string("dtype") == "bfloat16" || layout.dtype != at::kFloat ? 2.0 : 4.0;
  // K and V; under sequence parallelism a rank holds its share of the heads of every token.
  const std::int64_t width = c.dim / std::max(layout.sequence_parallel, 1);
  const double frame_bytes = 2.0 * static_cast<double>(tokens * width * layout.batch_size) * value;
  const std::int64_t held = causal.window_frames > 0 ? std::min(causal.window_frames, frames) : frames;
  const std::int64_t experts = n.expert == wan::Expert::Both ? 2 : 1;  // each expert's keys and values its own
  run.held.push_back({fmt::format("the rollout's KV cache: {}{} blocks x {} frames of {} tokens, keys and values{}, "
                                  "batch {}",
                                  experts == 2 ? "2 experts x " : "", c.num_layers, held, tokens,
                                  layout.sequence_parallel > 1
                                      ? fmt::format(" of 1/{} of the heads", layout.sequence_parallel)
                                      : "",
                                  layout.batch_size),
                      static_cast<double>(experts * c.num_layers * held) * frame_bytes});
  if (o.boolean("gradient_checkpointing")) return;  // a recomputed block attends over the cache's own tensors
  std::int64_t attended = 0;
  for (std::int64_t k = 0, chunks = causal.chunks(frames); k < chunks; ++k) {
    const std::int64_t end = causal.chunk_first(k) + causal.chunk_frames(k);
    attended += causal.window_frames > 0 ? std::min(end, causal.window_frames) : end;
  }
  if (attended > frames)
    run.held.push_back({fmt::format("the exit passes' keys and values kept for backward beyond one forward's ({} "
                                    "frames attended for {})",
                                    attended, frames),
                        static_cast<double>(c.num_layers * (attended - frames)) * frame_bytes});
}

}  // namespace

wan::PlannedRun planned_run(const wanfw::Options& o, const Networks& n, const DistillSettings& s,
                            const wanfw::TrainingLayout& layout) {
  wan::PlannedRun run{n.student, s.lora, o.string("dtype"), 1, s.task};
  bool teacher_held = o.string("teacher_device").empty();  // elsewhere: on another device, or the CPU
  if (s.objective == Objective::Dmd) {
    const DmdSettings dmd = dmd_settings_from(o, n.student, n.teacher, s, n.expert);
    if (dmd.shared_base) {
      run.models = n.expert == wan::Expert::Both ? 2 : 1;  // both experts' bases, each with both adapter sets
      run.more_adapters = wan::adapter_parameter_count(n.teacher, dmd.critic_lora) * run.models;
      teacher_held = false;  // the base without adapters is the real score
    } else if (dmd.critic_lora.enabled()) {
      run.critic = n.teacher;
      run.critic_adapters = wan::adapter_parameter_count(n.teacher, dmd.critic_lora);
    } else {
      run.held.push_back({fmt::format("the critic trained whole in {}", run.dtype), 0, /*in_module=*/true,
                          static_cast<double>(n.teacher.parameter_count())});
      run.held_graph = n.teacher;
    }
  }
  if (teacher_held) {
    const bool fp8 = o.string("teacher_base_dtype") == "float8_e4m3fn";
    const std::string dtype = o.string("teacher_dtype");
    run.held.push_back(
        {fmt::format("the frozen teacher in {}", fp8 ? dtype + ", its blocks' Linear weights in fp8" : dtype),
         wan::frozen_dit_bytes(n.teacher, dtype, fp8)});
  }
  add_rollout(run, o, n, s, planned_layout(layout, s));
  return run;
}

wanfw::TrainingLayout planned_layout(wanfw::TrainingLayout layout, const DistillSettings& s) {
  // Data-free: the latents have latent_size whatever the prompts' data set says.
  if (s.latent_size && (layout.latent.empty() || s.inputs != Inputs::Data))
    layout.latent = {s.latent_size->frames, s.latent_size->height, s.latent_size->width};
  return layout;
}

}  // namespace wan_distill
