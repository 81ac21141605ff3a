#include "distill_memory.hpp"

#include <fmt/format.h>

#include "dmd/dmd_schema.hpp"
#include "wan/lora.hpp"

namespace wan_distill {

wan::PlannedRun planned_run(const wanfw::Options& o, const Networks& n, const DistillSettings& s) {
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
    run.held.push_back({fmt::format("the frozen teacher in {}", fp8 ? dtype + ", its blocks' Linear weights in fp8" : dtype),
                        wan::frozen_dit_bytes(n.teacher, dtype, fp8)});
  }
  return run;
}

wanfw::TrainingLayout planned_layout(wanfw::TrainingLayout layout, const DistillSettings& s) {
  if (layout.latent.empty() && s.latent_size)
    layout.latent = {s.latent_size->frames, s.latent_size->height, s.latent_size->width};
  return layout;
}

}  // namespace wan_distill
