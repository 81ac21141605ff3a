#include "dmd/dmd_summary.hpp"

#include <fmt/format.h>

#include "dmd/dmd_schema.hpp"
#include "wan/lora.hpp"

namespace wan_distill {

std::string levels_text(const DmdSettings& dmd) {
  std::string levels;
  for (double s : dmd.levels()) levels += fmt::format("{}{:.4f}", levels.empty() ? "" : ", ", s);
  return levels;
}

std::string dmd_summary(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                        const DistillSettings& common, bool expert_teacher) {
  const DmdSettings dmd = dmd_settings_from(o, student, teacher, common, expert_teacher);
  return fmt::format("dmd: generator {} steps at levels {}, critic {} steps per generator step, real guidance {}\n{}",
                     dmd.generator_steps, levels_text(dmd), dmd.critic_updates, dmd.real_guidance,
                     dmd_memory(dmd, student, teacher, common.lora, o.string("dtype"), o.string("teacher_dtype")));
}

std::string dmd_memory(const DmdSettings& dmd, const wan::WanConfig& student, const wan::WanConfig& teacher,
                       const wan::LoraSettings& generator_lora, const std::string& dtype,
                       const std::string& teacher_dtype) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double bytes = wan::bytes_per_value(dtype);
  const double t = static_cast<double>(teacher.parameter_count()), s = static_cast<double>(student.parameter_count());
  // Trained weights: weight, gradient, two moments in the weights' dtype; adapters in float32.
  const auto trained = [&](double weights, const wan::WanConfig& config, const wan::LoraSettings& lora) {
    if (!lora.enabled()) return weights * bytes * 4;
    return weights * bytes + static_cast<double>(wan::adapter_parameter_count(config, lora)) * 4 * 4;
  };
  const double real = t * wan::bytes_per_value(teacher_dtype);
  const double separate = real + trained(s, student, generator_lora) + trained(t, teacher, dmd.critic_lora);
  std::string out = fmt::format(
      "dmd memory before activations: separate networks: teacher {:.2f} GiB + generator {:.2f} GiB + critic {:.2f} "
      "GiB = {:.2f} GiB{}\n",
      real / kGiB, trained(s, student, generator_lora) / kGiB, trained(t, teacher, dmd.critic_lora) / kGiB,
      separate / kGiB, dmd.shared_base ? "" : " (this config)");
  if (generator_lora.enabled() && dmd.critic_lora.enabled()) {
    const double adapters = static_cast<double>(wan::adapter_parameter_count(student, generator_lora) +
                                                wan::adapter_parameter_count(teacher, dmd.critic_lora)) *
                            16;
    out += fmt::format(
        "dmd memory before activations: one shared base {:.2f} GiB + both adapter sets {:.2f} GiB = "
        "{:.2f} GiB{}\n",
        t * bytes / kGiB, adapters / kGiB, (t * bytes + adapters) / kGiB,
        dmd.shared_base ? " (this config)" : " (shared_base: true)");
  }
  return out;
}

}  // namespace wan_distill
