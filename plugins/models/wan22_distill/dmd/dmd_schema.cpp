#include "dmd/dmd_schema.hpp"

#include <algorithm>

#include <fmt/format.h>

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
          .doc("dmd: the generator's steps: it samples (and `wanfw sample` draws) along the official schedule of "
               "this many steps, shifted by generator_shift."),
      option("generator_shift", T::Number)
          .value("5.0")
          .doc("dmd: shift k of the generator's levels, k s / (1 + (k-1) s) of the schedule's (as sample_shift "
               "for a many-step sampler)."),
      option("real_guidance", T::Number)
          .value("4.5")
          .doc("dmd: guidance of the real score, v_u + g (v_c - v_u) (the official Wan form; a scale of the form "
               "v_c + g' (v_c - v_u) is g = g' + 1)."),
      option("real_guidance_low_noise", T::Number)
          .value("0")
          .doc("dmd with teacher_expert: both: the low-noise expert's real-score guidance, real_guidance the "
               "high-noise one's (the official T2V-A14B samplers: 4.0 high, 3.0 low); 0 takes real_guidance."),
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
                              const DistillSettings& common, wan::Expert expert) {
  DmdSettings s;
  s.generator_steps = o.integer("generator_steps");
  s.generator_shift = o.number("generator_shift");
  s.real_guidance = o.number("real_guidance");
  s.low_noise_real_guidance =
      o.number("real_guidance_low_noise") > 0 ? o.number("real_guidance_low_noise") : s.real_guidance;
  s.critic_updates = static_cast<int>(o.integer("critic_updates_per_generator_update"));
  s.critic_lr_scale = o.number("critic_lr_scale");
  s.min_level = o.number("score_level_min");
  s.max_level = o.number("score_level_max");
  s.score_shift = o.number("score_shift");
  s.regression_weight = o.number("regression_weight");
  s.shared_base = o.boolean("shared_base");
  if (common.objective != Objective::Dmd) return s;
  // The schedule has 1000 timesteps: a generator of more steps would visit the same levels again.
  if (s.generator_steps < 1 || s.generator_steps > 1000)
    o.fail("generator_steps", fmt::format("must lie in [1, 1000] (the schedule's timesteps), got {}", s.generator_steps),
           "DMD students take 1 to 4 steps");
  if (s.generator_shift <= 0) o.fail("generator_shift", "must be positive");
  if (s.real_guidance <= 0) o.fail("real_guidance", "must be positive (1: the teacher's conditional score)");
  if (o.number("real_guidance_low_noise") < 0)
    o.fail("real_guidance_low_noise", "must be positive (1: the expert's conditional score), or 0 for real_guidance");
  if (o.given("real_guidance_low_noise") && expert != wan::Expert::Both)
    o.fail("real_guidance_low_noise", "a guidance of the low-noise expert's own needs both experts",
           "set teacher_expert: both, or use real_guidance");
  if (s.critic_updates < 1) o.fail("critic_updates_per_generator_update", "must be at least 1");
  if (!(s.critic_lr_scale > 0)) o.fail("critic_lr_scale", "must be positive");
  if (!(0 < s.min_level && s.min_level < s.max_level && s.max_level < 1))
    o.fail("score_level_min",
           fmt::format("the score levels need 0 < min < max < 1, not [{}, {}]", s.min_level, s.max_level));
  if (s.score_shift <= 0) o.fail("score_shift", "must be positive");
  if (s.regression_weight < 0) o.fail("regression_weight", "must be 0 or more");
  if (expert == wan::Expert::HighNoise || expert == wan::Expert::LowNoise)
    o.fail("teacher_expert",
           "dmd with one expert of a two-expert teacher is not supported: the generator samples every "
           "level, which one expert does not cover",
           "set teacher_expert: both (with shared_base: true) to distil both experts, or use objective: velocity");
  if (expert == wan::Expert::Both && !s.shared_base)
    o.fail("shared_base",
           "dmd of both experts keeps generator and critic as adapters on the experts' shared frozen base: "
           "separate copies of two 14B experts are not supported",
           "set shared_base: true, lora.rank and critic_lora.rank (e.g. 64 each)");
  if (common.inputs == Inputs::TeacherTrajectory)
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

}  // namespace wan_distill
