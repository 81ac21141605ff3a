#include "dmd/dmd_assembly.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "dmd/dmd_model.hpp"
#include "dmd/dmd_summary.hpp"
#include "networks/student_init.hpp"
#include "wan/lora.hpp"
#include "wan/memory_options.hpp"
#include "wanfw/log.hpp"

namespace wan_distill {

std::unique_ptr<DmdModel> make_dmd_model(const wanfw::Options& o, wan::WanDenoiser student,
                                             std::shared_ptr<FrozenTeacher> teacher, DistillSettings common,
                                             DmdSettings dmd, const wan::WanPlacement& placement) {
  const bool checkpointing = o.boolean("gradient_checkpointing");
  wan::WanDiT critic{nullptr};
  // The critic's adapters draw their initial values from a stream of their own in both
  // arrangements, so a shared base trains exactly what separate copies train.
  if (dmd.shared_base) {
    {
      const SeededDraws draws("critic adapters");
      student.attach_second_adapters(dmd.critic_lora);
    }
    wanfw::log::info(
        fmt::format("dmd: one frozen base shared by the real score (no adapters), the generator (lora, rank {}) and "
                    "the critic (critic_lora, rank {})",
                    common.lora.rank, dmd.critic_lora.rank));
    if (student.expert() == wan::Expert::Both)
      wanfw::log::info(fmt::format(
          "dmd: both experts, each with its generator's and its critic's adapters; every pass runs each sample on the "
          "expert that owns its level (high noise at t >= {:g})",
          student.boundary() * 1000));
  } else {
    wan::WanPlacement critic_at = placement;
    critic_at.fp8_base = placement.fp8_base && dmd.critic_lora.enabled();  // a critic that trains every weight is not fp8
    critic = wan::WanDiT(teacher->config(), critic_at);
    init_from_teacher(*critic, *teacher->dits().front());
    if (dmd.critic_lora.enabled()) {
      const SeededDraws draws("critic adapters");
      wan::attach_adapters(*critic, dmd.critic_lora);
    }
    critic->set_gradient_checkpointing(checkpointing);
    critic->set_activation_offload(wan::activation_offload_from(o));
    critic->set_recompute_chunks(wan::recompute_chunks_from(o));
    wanfw::log::info(
        fmt::format("dmd: the critic is a copy of the teacher{}, trained {} optimizer steps per generator step",
                    dmd.critic_lora.enabled() ? fmt::format(" with adapters of rank {}", dmd.critic_lora.rank)
                                              : std::string(" (every weight)"),
                    dmd.critic_updates));
  }
  wanfw::log::info(fmt::format("dmd: the generator samples in {} steps at levels {}; real score guidance {}",
                               dmd.generator_steps, levels_text(dmd), guidance_text(dmd)));
  if (common.causal.enabled()) wanfw::log::info("dmd: " + causal_text(common, student.expert()));
  return std::make_unique<DmdModel>(std::move(student), std::move(critic), std::move(teacher), std::move(common),
                                    std::move(dmd));
}

}  // namespace wan_distill
