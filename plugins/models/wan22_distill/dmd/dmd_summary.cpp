#include "dmd/dmd_summary.hpp"

#include <fmt/format.h>

#include "dmd/dmd_schema.hpp"
#include "wan/gpu_memory.hpp"
#include "wan/lora.hpp"

namespace wan_distill {

std::string levels_text(const DmdSettings& dmd) {
  std::string levels;
  for (double s : dmd.levels()) levels += fmt::format("{}{:.4f}", levels.empty() ? "" : ", ", s);
  return levels;
}

DmdBytes dmd_bytes(const DmdSettings& dmd, const wan::WanConfig& student, const wan::WanConfig& teacher,
                   const wan::LoraSettings& generator_lora, const std::string& dtype,
                   const std::string& teacher_dtype) {
  const double bytes = wan::bytes_per_value(dtype);
  const double t = static_cast<double>(teacher.parameter_count()), s = static_cast<double>(student.parameter_count());
  // Trained weights: weight, gradient, two moments in the weights' dtype; adapters in float32.
  const auto trained = [&](double weights, const wan::WanConfig& config, const wan::LoraSettings& lora) {
    if (!lora.enabled()) return weights * bytes * 4;
    return weights * bytes + static_cast<double>(wan::adapter_parameter_count(config, lora)) * 4 * 4;
  };
  DmdBytes out;
  out.teacher = t * wan::bytes_per_value(teacher_dtype);
  out.generator = trained(s, student, generator_lora);
  out.critic = trained(t, teacher, dmd.critic_lora);
  out.shared_base = t * bytes;
  if (generator_lora.enabled() && dmd.critic_lora.enabled())
    out.adapters = static_cast<double>(wan::adapter_parameter_count(student, generator_lora) +
                                       wan::adapter_parameter_count(teacher, dmd.critic_lora)) *
                   16;
  return out;
}

std::string dmd_summary(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                        const DistillSettings& common, bool expert_teacher, const wanfw::TrainingLayout& layout,
                        bool verdict) {
  const DmdSettings dmd = dmd_settings_from(o, student, teacher, common, expert_teacher);
  const DmdBytes bytes = dmd_bytes(dmd, student, teacher, common.lora, o.string("dtype"), o.string("teacher_dtype"));
  return fmt::format("dmd: generator {} steps at levels {}, critic {} steps per generator step, real guidance {}\n{}{}",
                     dmd.generator_steps, levels_text(dmd), dmd.critic_updates, dmd.real_guidance,
                     dmd_memory(dmd, bytes),
                     verdict ? dmd_gpu_memory(dmd, bytes, student, teacher, o.boolean("gradient_checkpointing"), layout)
                             : std::string());
}

std::string dmd_memory(const DmdSettings& dmd, const DmdBytes& b) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::string out = fmt::format(
      "dmd memory before activations: separate networks: teacher {:.2f} GiB + generator {:.2f} GiB + critic {:.2f} "
      "GiB = {:.2f} GiB{}\n",
      b.teacher / kGiB, b.generator / kGiB, b.critic / kGiB, b.separate() / kGiB,
      dmd.shared_base ? "" : " (this config)");
  if (b.adapters > 0)
    out += fmt::format(
        "dmd memory before activations: one shared base {:.2f} GiB + both adapter sets {:.2f} GiB = "
        "{:.2f} GiB{}\n",
        b.shared_base / kGiB, b.adapters / kGiB, b.shared() / kGiB,
        dmd.shared_base ? " (this config)" : " (shared_base: true)");
  return out;
}

std::string dmd_gpu_memory(const DmdSettings& dmd, const DmdBytes& b, const wan::WanConfig& student,
                           const wan::WanConfig& teacher, bool gradient_checkpointing,
                           const wanfw::TrainingLayout& layout) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  // Every network a step holds: fsdp shards the trained module (with a shared base, the base is
  // in it); a separate teacher stays whole on every GPU.
  const double share = layout.sharded ? 1.0 / layout.gpus : 1.0;
  const double networks = dmd.shared_base ? b.shared() * share : b.teacher + (b.generator + b.critic) * share;
  // A phase keeps the graph of the network it trains (the generator, or the critic: the
  // teacher's architecture); the no-grad passes of the others hold one block at a time.
  const wan::ActivationEstimate generator = wan::estimate_activations(student, gradient_checkpointing, layout);
  const wan::ActivationEstimate critic = wan::estimate_activations(teacher, gradient_checkpointing, layout);
  const wan::ActivationEstimate& larger = critic.bytes > generator.bytes ? critic : generator;
  const double total = networks + larger.bytes;
  return fmt::format("dmd per GPU, {} on {} GPU{}: every network {:.2f} GiB ({}){} = {:.2f} GiB: {}\n", layout.strategy,
                     layout.gpus, layout.gpus == 1 ? "" : "s", networks / kGiB,
                     dmd.shared_base ? "one shared base and both adapter sets" : "teacher, generator and critic",
                     larger.text, total / kGiB, wan::gpu_fit(total));
}

}  // namespace wan_distill
