#include "dmd_options.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "dmd_model.hpp"
#include "student_init.hpp"
#include "wan/lora.hpp"
#include "wanfw/error.hpp"

namespace wan_distill {

namespace {

using wanfw::option;
using T = wanfw::OptionType;

bool same_architecture(const wan::WanConfig& a, const wan::WanConfig& b) {
  return a.dim == b.dim && a.ffn_dim == b.ffn_dim && a.num_layers == b.num_layers && a.num_heads == b.num_heads &&
         a.in_dim == b.in_dim && a.out_dim == b.out_dim && a.patch == b.patch && a.text_dim == b.text_dim;
}

}  // namespace

std::vector<wanfw::OptionSpec> dmd_options() {
  return {
      option("objective", T::Choice)
          .value("velocity")
          .choices({"velocity", "dmd"})
          .doc("velocity: the student regresses onto the teacher's velocity; dmd: distribution matching (DMD2), a "
               "few-step generator trained against the teacher's score and a critic of its own samples, in "
               "alternating phases."),
      option("generator_steps", T::Integer)
          .value("4")
          .doc("dmd: the generator's steps; its levels are the sampler's schedule for this many steps (sample_shift), "
               "and `wanfw sample` draws in them."),
      option("real_guidance", T::Number)
          .value("4.5")
          .doc("dmd: guidance of the real score, v_u + g (v_c - v_u) (the official Wan form; a scale of the form "
               "v_c + g' (v_c - v_u) is g = g' + 1)."),
      option("critic_updates_per_generator_update", T::Integer)
          .value("5")
          .doc("dmd: critic optimizer steps after each generator step (DMD2's two time-scale rule)."),
      option("critic_lr_scale", T::Number)
          .value("1.0")
          .doc("dmd: the critic's learning rate as a multiple of optimizer.lr."),
      option("critic_lora.rank", T::Integer)
          .value("0")
          .doc("dmd: rank of adapters trained on the critic (a copy of the teacher); 0 trains every critic weight."),
      option("critic_lora.alpha", T::Number).value("0").doc("dmd: the critic adapters' alpha; 0 takes the rank."),
      option("shared_base", T::Boolean)
          .value("false")
          .doc("dmd: generator and critic are adapters (lora.rank, critic_lora.rank) on one frozen copy of the "
               "teacher's weights, which with both adapter sets off is also the real score: one base instead of "
               "three."),
      option("score_level_min", T::Number).value("0.02").doc("dmd: the scores' levels are uniform in [min, max] ..."),
      option("score_level_max", T::Number).value("0.98").doc("dmd: ... then shifted by score_shift."),
      option("score_shift", T::Number).value("5.0").doc("dmd: shift k of the scores' levels, k s / (1 + (k-1) s)."),
      option("regression_weight", T::Number)
          .value("0.0")
          .doc("dmd: weight of mean (v_generator - v_real)^2 at the generator's input point, beside the DMD loss."),
  };
}

DmdSettings dmd_settings_from(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                              const DistillSettings& common, bool expert_teacher) {
  DmdSettings s;
  s.generator_steps = o.integer("generator_steps");
  s.generator_shift = common.sampler.shift;
  s.real_guidance = o.number("real_guidance");
  s.critic_updates = static_cast<int>(o.integer("critic_updates_per_generator_update"));
  s.critic_lr_scale = o.number("critic_lr_scale");
  s.min_level = o.number("score_level_min");
  s.max_level = o.number("score_level_max");
  s.score_shift = o.number("score_shift");
  s.regression_weight = o.number("regression_weight");
  s.shared_base = o.boolean("shared_base");
  if (o.string("objective") != "dmd") return s;
  if (s.generator_steps < 1) o.fail("generator_steps", "must be at least 1");
  if (s.real_guidance <= 0) o.fail("real_guidance", "must be positive (1: the teacher's conditional score)");
  if (s.critic_updates < 1) o.fail("critic_updates_per_generator_update", "must be at least 1");
  if (!(s.critic_lr_scale > 0)) o.fail("critic_lr_scale", "must be positive");
  if (!(0 < s.min_level && s.min_level < s.max_level && s.max_level < 1))
    o.fail("score_level_min",
           fmt::format("the score levels need 0 < min < max < 1, not [{}, {}]", s.min_level, s.max_level));
  if (s.score_shift <= 0) o.fail("score_shift", "must be positive");
  if (s.regression_weight < 0) o.fail("regression_weight", "must be 0 or more");
  if (expert_teacher)
    o.fail("objective",
           "dmd with one expert of a two-expert teacher is not supported: the generator samples every "
           "level, which one expert does not cover",
           "distil a single-DiT teacher (wan2.1-t2v-1.3b, wan2.2-ti2v-5b, wan2.1-t2v-14b), or use objective: velocity");
  if (common.inputs == "teacher_trajectory")
    o.fail("inputs",
           "objective dmd makes its own inputs from the generator's steps: teacher_trajectory is for "
           "objective velocity",
           "set inputs: generator (data-free, backward simulation) or inputs: data (noised data latents)");
  s.critic_lora = common.lora;  // the same layers, without dropout
  s.critic_lora.rank = o.integer("critic_lora.rank");
  s.critic_lora.alpha =
      o.number("critic_lora.alpha") > 0 ? o.number("critic_lora.alpha") : static_cast<double>(s.critic_lora.rank);
  s.critic_lora.dropout = 0;
  s.critic_lora.load.clear();
  s.critic_lora.lr_scale = 1.0;
  if (s.critic_lora.rank < 0 || s.critic_lora.rank > std::min(teacher.dim, teacher.ffn_dim))
    o.fail("critic_lora.rank",
           fmt::format("must be 0 (every critic weight trains) or in 1..{}", std::min(teacher.dim, teacher.ffn_dim)));
  if (s.critic_lora.enabled() && s.critic_lora.targets.empty())
    o.fail("lora.targets", "the critic's adapters take lora.targets, which selects no layer");
  if (s.shared_base) {
    if (!common.lora.enabled() || !s.critic_lora.enabled())
      o.fail("shared_base", "a shared base needs adapters on both the generator and the critic",
             "set lora.rank and critic_lora.rank (e.g. 64 each)");
    if (!same_architecture(student, teacher))
      o.fail("shared_base", "a shared base needs the student to be the teacher's architecture",
             "leave the student_* dimensions and student_preset empty");
    if (o.string("student_init") != "teacher")
      o.fail("shared_base", "a shared base is the teacher's weights: student_init must be teacher");
  }
  return s;
}

std::unique_ptr<wanfw::Model> make_dmd_model(const wanfw::Options& o, wan::WanDiT student,
                                             std::shared_ptr<FrozenTeacher> teacher, DistillSettings common,
                                             DmdSettings dmd, const wan::WanPlacement& placement) {
  const bool checkpointing = o.boolean("gradient_checkpointing");
  wan::WanDiT critic{nullptr};
  // The critic's adapters draw their initial values from where the generator's left the default
  // generator in both arrangements, so a shared base trains exactly what separate copies train.
  at::CPUGeneratorImpl& generator = *at::check_generator<at::CPUGeneratorImpl>(at::detail::getDefaultCPUGenerator());
  const c10::intrusive_ptr<c10::TensorImpl> after_generator = generator.get_state();
  if (dmd.shared_base) {
    wan::attach_second_adapters(*student, dmd.critic_lora);
    teacher.reset();  // the base without adapters is the real score: the separate copy goes
    spdlog::info(
        "dmd: one frozen base shared by the real score (no adapters), the generator (lora, rank {}) and "
        "the critic (critic_lora, rank {})",
        common.lora.rank, dmd.critic_lora.rank);
  } else {
    critic = wan::WanDiT(teacher->config(), placement);
    init_from_teacher(*critic, *teacher->dits().front());
    generator.set_state(*after_generator);
    if (dmd.critic_lora.enabled()) wan::attach_adapters(*critic, dmd.critic_lora);
    critic->set_gradient_checkpointing(checkpointing);
    spdlog::info("dmd: the critic is a copy of the teacher{}, trained {} optimizer steps per generator step",
                 dmd.critic_lora.enabled() ? fmt::format(" with adapters of rank {}", dmd.critic_lora.rank)
                                           : std::string(" (every weight)"),
                 dmd.critic_updates);
  }
  student->set_gradient_checkpointing(checkpointing);
  std::string levels;
  for (double s : dmd.levels()) levels += fmt::format("{}{:.4f}", levels.empty() ? "" : ", ", s);
  spdlog::info("dmd: the generator samples in {} steps at levels {}; real score guidance {}", dmd.generator_steps,
               levels, dmd.real_guidance);
  return std::make_unique<DmdModel>(std::move(student), std::move(critic), std::move(teacher), std::move(common),
                                    std::move(dmd));
}

std::string dmd_summary(const wanfw::Options& o, const wan::WanConfig& student, const wan::WanConfig& teacher,
                        const DistillSettings& common, bool expert_teacher) {
  const DmdSettings dmd = dmd_settings_from(o, student, teacher, common, expert_teacher);
  return fmt::format("dmd: generator {} steps, critic {} steps per generator step, real guidance {}\n{}",
                     dmd.generator_steps, dmd.critic_updates, dmd.real_guidance,
                     dmd_memory(dmd, student, teacher, common.lora, o.string("dtype"), o.string("teacher_dtype")));
}

std::string dmd_memory(const DmdSettings& dmd, const wan::WanConfig& student, const wan::WanConfig& teacher,
                       const wan::LoraSettings& generator_lora, const std::string& dtype,
                       const std::string& teacher_dtype) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double bytes = dtype == "bfloat16" ? 2 : 4;
  const double t = static_cast<double>(teacher.parameter_count()), s = static_cast<double>(student.parameter_count());
  // Trained weights: weight, gradient, two moments in the weights' dtype; adapters in float32.
  const auto trained = [&](double weights, const wan::WanConfig& config, const wan::LoraSettings& lora) {
    if (!lora.enabled()) return weights * bytes * 4;
    return weights * bytes + static_cast<double>(wan::adapter_parameter_count(config, lora)) * 4 * 4;
  };
  const double real = t * (teacher_dtype == "bfloat16" ? 2 : 4);
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
