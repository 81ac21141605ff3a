#include "dmd/dmd_summary.hpp"

#include <fmt/format.h>

#include "dmd/dmd_schema.hpp"
#include "wan/lora.hpp"
#include "wan/memory_estimate.hpp"

namespace wan_distill {

std::string levels_text(const DmdSettings& dmd) {
  std::string levels;
  for (double s : dmd.levels()) levels += fmt::format("{}{:.4f}", levels.empty() ? "" : ", ", s);
  return levels;
}

std::string guidance_text(const DmdSettings& dmd) {
  if (dmd.low_noise_real_guidance == dmd.real_guidance) return fmt::format("{}", dmd.real_guidance);
  return fmt::format("{} (high noise), {} (low noise)", dmd.real_guidance, dmd.low_noise_real_guidance);
}

DmdBytes dmd_bytes(const DmdSettings& dmd, const wan::WanConfig& student, const wan::WanConfig& teacher,
                   const wan::LoraSettings& generator_lora, const std::string& dtype,
                   const std::string& teacher_dtype) {
  DmdBytes out;
  out.teacher = wan::frozen_dit_bytes(teacher, teacher_dtype, false);
  out.generator = wan::dit_state_bytes(student, generator_lora, dtype);
  out.critic = wan::dit_state_bytes(teacher, dmd.critic_lora, dtype);
  out.shared_base = wan::frozen_dit_bytes(teacher, dtype, false);
  if (generator_lora.enabled() && dmd.critic_lora.enabled())
    out.adapters = static_cast<double>(wan::adapter_parameter_count(student, generator_lora) +
                                       wan::adapter_parameter_count(teacher, dmd.critic_lora)) *
                   wan::trained_parameter_bytes(4, false).total();  // float32 adapters
  return out;
}

std::string causal_text(const DistillSettings& common, wan::Expert expert) {
  if (!common.causal.enabled()) return "";
  const wan::CausalLayout& layout = *common.causal.layout;
  return fmt::format(
      "causal generator (Self Forcing): {}{}, trained on its own rollout, every "
      "chunk leaving at the step drawn for the optimizer step{}",
      layout.describe(),
      layout.window_frames > 0
          ? fmt::format(", a window of {} frames with {} sink(s)", layout.window_frames, layout.sink_frames)
          : std::string(),
      expert == wan::Expert::Both ? "; each expert keeps a KV cache of its own: a chunk's steps run on the expert "
                                    "of their level, its context pass through both"
                                  : "");
}

std::string dmd_summary(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                        const DistillSettings& common, wan::Expert expert) {
  const DmdSettings dmd = dmd_settings_from(o, student, teacher, common, expert);
  DmdBytes bytes = dmd_bytes(dmd, student, teacher, common.lora, o.string("dtype"), o.string("teacher_dtype"));
  if (expert == wan::Expert::Both)  // every network once per expert
    for (double* part : {&bytes.teacher, &bytes.generator, &bytes.critic, &bytes.shared_base, &bytes.adapters})
      *part *= 2;
  const std::string causal = causal_text(common, expert);
  return fmt::format("dmd: generator {} steps at levels {}, critic {} steps per generator step, real guidance {}\n{}{}",
                     dmd.generator_steps, levels_text(dmd), dmd.critic_updates, guidance_text(dmd),
                     causal.empty() ? "" : "dmd: " + causal + "\n", dmd_memory(dmd, bytes));
}

std::string dmd_memory(const DmdSettings& dmd, const DmdBytes& b) {
  std::string out = fmt::format(
      "dmd memory before activations: separate networks: teacher {:.2f} GiB + generator {:.2f} GiB + critic {:.2f} "
      "GiB = {:.2f} GiB{}\n",
      b.teacher / wan::kGiB, b.generator / wan::kGiB, b.critic / wan::kGiB, b.separate() / wan::kGiB,
      dmd.shared_base ? "" : " (this config)");
  if (b.adapters > 0)
    out += fmt::format(
        "dmd memory before activations: one shared base {:.2f} GiB + both adapter sets {:.2f} GiB = "
        "{:.2f} GiB{}\n",
        b.shared_base / wan::kGiB, b.adapters / wan::kGiB, b.shared() / wan::kGiB,
        dmd.shared_base ? " (this config)" : " (shared_base: true)");
  return out;
}

}  // namespace wan_distill
