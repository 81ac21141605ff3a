#include "distill_options.hpp"

#include <array>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dmd/causal_rollout.hpp"
#include "dmd/dmd_schema.hpp"
#include "negative_context.hpp"
#include "wan/memory_options.hpp"
#include "wan/vae/vae_decoding.hpp"
#include "wan/wan_options.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"

namespace wan_distill {

namespace {

using wanfw::option;
using T = wanfw::OptionType;

constexpr std::array<std::pair<Inputs, const char*>, 3> kInputs{
    {{Inputs::Data, "data"}, {Inputs::TeacherTrajectory, "teacher_trajectory"}, {Inputs::Generator, "generator"}}};

Inputs parse_inputs(const std::string& name) {  // one of the option's choices
  for (const auto& [inputs, spelling] : kInputs)
    if (name == spelling) return inputs;
  return Inputs::Data;
}

/// The options only the velocity objective reads (its target, its trajectory, the student's
/// sampler, which the DMD generator replaces with its own steps), and those only dmd reads.
constexpr std::array<std::pair<const char*, const char*>, 9> kVelocityOnly{{
    {"guidance_scale", "the real score's guidance is real_guidance"},
    {"velocity_weight", "the generator's loss is the DMD loss (plus regression_weight)"},
    {"flow_matching_weight", "the generator's loss is the DMD loss (plus regression_weight)"},
    {"trajectory_steps", "the generator's own steps make its inputs"},
    {"sample_steps", "the generator samples in generator_steps"},
    {"preview_steps", "the generator previews in generator_steps"},
    {"sample_shift", "the generator's levels take generator_shift"},
    {"sample_guidance", "the generator samples without guidance"},
    {"sample_solver", "the generator samples with the renoise solver"},
}};
constexpr std::array<const char*, 13> kDmdOnly{
    "generator_steps", "generator_shift",  "real_guidance",     "real_guidance_low_noise", "critic_updates_per_generator_update",
    "critic_lr_scale", "critic_lora.rank", "critic_lora.alpha", "shared_base",
    "score_level_min", "score_level_max",  "score_shift",       "regression_weight"};

void refuse_what_the_objective_does_not_read(const wanfw::Options& o, Objective objective) {
  if (objective == Objective::Dmd) {
    for (const auto& [name, instead] : kVelocityOnly)
      if (o.given(name))
        o.fail(name, fmt::format("objective dmd does not read it: {}", instead),
               fmt::format("remove {} from the model section", name));
    return;
  }
  std::vector<std::string> ignored;
  for (const char* name : kDmdOnly)
    if (o.given(name)) ignored.emplace_back(name);
  if (!ignored.empty())
    wanfw::log::warn(fmt::format("{}: objective velocity ignores {} (options of objective dmd)", o.section(),
                                 fmt::join(ignored, ", ")));
}

}  // namespace

const char* inputs_name(Inputs inputs) {
  for (const auto& [each, spelling] : kInputs)
    if (each == inputs) return spelling;
  return "data";
}

Networks networks_from(const wanfw::Options& o) {
  Networks n;
  n.teacher = wan::config_from_options(o, "teacher_");
  n.student = wan::config_from_options(o, "student_", &n.teacher);
  const auto& t = n.teacher;
  const auto& s = n.student;
  if (t.has_vace() || s.has_vace())
    o.fail(t.has_vace() ? "teacher_preset" : "student_preset",
           "wan22_distill distills base models; a VACE model's control branch is not distilled yet",
           "distill the base model (its preset without VACE), or train the VACE model with wan22_flow_matching");
  if (s.in_dim != t.in_dim || s.out_dim != t.out_dim || s.patch != t.patch)
    o.fail("student_preset",
           fmt::format("the student must share the teacher's latent space: in/out channels {}/{} and patch {}x{}x{}, "
                       "the student has {}/{} and {}x{}x{}",
                       t.in_dim, t.out_dim, t.patch[0], t.patch[1], t.patch[2], s.in_dim, s.out_dim, s.patch[0],
                       s.patch[1], s.patch[2]),
           "leave student_preset empty (the teacher's) and change depth or width: student_num_layers, student_dim, "
           "student_ffn_dim, student_num_heads");
  if (s.text_dim != t.text_dim)
    o.fail("student_text_dim",
           fmt::format("the student reads the teacher's text embeddings ({} wide), not {}", t.text_dim, s.text_dim));
  n.expert = wan::parse_expert(o.string("teacher_expert"));
  if (o.number("teacher_boundary") != 0 && !(o.number("teacher_boundary") > 0 && o.number("teacher_boundary") < 1000))
    o.fail("teacher_boundary", fmt::format("{} lies outside the timesteps (0, 1000)", o.number("teacher_boundary")),
           "875 for Wan2.2 T2V-A14B, 900 for I2V-A14B; 0 takes the preset's");
  if (o.number("teacher_boundary") != 0 && n.expert == wan::Expert::None)
    o.fail("teacher_boundary", "a boundary splits the timesteps between two experts, but the teacher is one network "
                               "(teacher_expert: none)",
           "set teacher_expert, or remove teacher_boundary");
  const double boundary =
      o.number("teacher_boundary") > 0 ? o.number("teacher_boundary") : static_cast<double>(t.expert_boundary);
  if (n.expert == wan::Expert::None && t.expert_boundary > 0)
    o.fail("teacher_expert",
           fmt::format("teacher preset {} is two experts split at t = {}: say which one teaches", t.preset,
                       t.expert_boundary),
           "set teacher_expert to high_noise or low_noise (or both, under objective dmd)");
  if (n.expert != wan::Expert::None) {
    if (!(boundary > 0 && boundary < 1000))
      o.fail("teacher_boundary", "an expert teacher needs a boundary between 0 and 1000, and the preset has none",
             "set teacher_boundary (875 for Wan2.2 T2V-A14B, 900 for I2V-A14B)");
    n.boundary = boundary / 1000.0;
  }
  return n;
}

DistillSettings settings_from(const wanfw::Options& o, const Networks& n, bool read_files) {
  DistillSettings s;
  s.objective = o.string("objective") == "dmd" ? Objective::Dmd : Objective::Velocity;
  s.task = wan::parse_task(o.string("task"));
  refuse_what_the_objective_does_not_read(o, s.objective);
  for (const auto& [name, config] : {std::pair{"teacher", &n.teacher}, {"student", &n.student}})
    if (config->in_dim != wan::task_in_dim(*config, s.task))
      o.fail("task",
             fmt::format("the {} task feeds the {} {} input channels, but its in_dim is {}", wan::task_name(s.task),
                         name, wan::task_in_dim(*config, s.task), config->in_dim),
             s.task == wan::Task::I2V ? "use an i2v teacher (wan2.2-i2v-a14b), or set teacher_in_dim"
                                      : "use a t2v/ti2v teacher preset, or set teacher_in_dim");
  s.inputs = parse_inputs(o.string("inputs"));
  s.velocity_weight = o.number("velocity_weight");
  s.flow_matching_weight = o.number("flow_matching_weight");
  s.guidance = o.number("guidance_scale");
  if (s.velocity_weight < 0 || s.flow_matching_weight < 0 || s.velocity_weight + s.flow_matching_weight <= 0)
    o.fail("velocity_weight", "the objective's weights must be >= 0 and not both 0");
  if (s.guidance <= 0) o.fail("guidance_scale", "must be positive (1: the teacher's conditional prediction)");
  if (read_files) s.negative = negative_context(o, n.teacher);
  s.trajectory_steps = o.integer("trajectory_steps");
  if (s.trajectory_steps < 1) o.fail("trajectory_steps", "must be at least 1");
  s.latent_size = wan::bucket_option(o, "latent_size");
  if (n.expert == wan::Expert::Both && s.objective != Objective::Dmd)
    o.fail("teacher_expert", "teacher_expert: both belongs to objective dmd (with shared_base)",
           "set teacher_expert to high_noise or low_noise: the velocity objective distils one expert");
  if (s.inputs == Inputs::Generator && s.objective != Objective::Dmd)
    o.fail("inputs", "inputs: generator (the generator's own steps) belongs to objective dmd",
           "set objective: dmd, or inputs: teacher_trajectory for data-free velocity distillation");
  if (s.inputs != Inputs::Data) {
    if (s.flow_matching_weight > 0)
      o.fail("flow_matching_weight",
             fmt::format("data-free distillation (inputs: {}) has no data latents for a flow-matching term",
                         inputs_name(s.inputs)),
             "set flow_matching_weight: 0, or inputs: data");
    if (s.task == wan::Task::TI2V) o.fail("inputs", "ti2v keeps the data's first frame clean: it needs inputs: data");
    if (s.task == wan::Task::T2V && !s.latent_size)
      o.fail("latent_size", "data-free t2v distillation needs the latents' size",
             "set latent_size: \"FxHxW\" (latent frames x height x width, e.g. \"21x60x104\")");
  }

  // Timesteps: the flow-matching samplers, or a fixed list warped by the shift; an expert teacher
  // knows its side of the boundary only.
  const double lo = n.expert == wan::Expert::HighNoise ? n.boundary : 0.0;
  const double hi = n.expert == wan::Expert::LowNoise ? n.boundary : 1.0;
  s.timesteps = wan::timestep_sampling_from(o, lo, hi, "teacher_expert");
  s.validation_timesteps = wan::validation_timesteps_from(o, s.timesteps);
  s.sampler = wan::sampler_settings_from(o);
  if (!s.sampler.size) s.sampler.size = s.latent_size;
  s.lora = wan::lora_settings_from(o, n.student, n.expert == wan::Expert::Both ? wan::Expert::Both : wan::Expert::None);
  s.fp8_base = wan::fp8_base_from(o, "", !s.lora.enabled());
  s.teacher_fp8 = wan::fp8_base_from(o, "teacher_", /*trains_base=*/false);
  s.activation_offload = wan::activation_offload_from(o);
  s.recompute_chunks = wan::recompute_chunks_from(o);
  (void)teacher_device(o, c10::Device(c10::kCPU));  // the name is checked with the config
  s.causal = wan::causal_settings_from(o, /*own_steps=*/false);
  if (s.causal.enabled()) refuse_what_a_causal_generator_cannot_do(o, s, n.expert);
  return s;
}

torch::Device teacher_device(const wanfw::Options& o, const c10::Device& student) {
  const std::string name = o.string("teacher_device");
  if (name.empty()) return student;
  try {
    return torch::Device(name);
  } catch (const std::exception&) {
    o.fail("teacher_device", fmt::format("'{}' is not a device", name), "use cpu, cuda or cuda:N");
  }
}

std::vector<wanfw::OptionSpec> distill_options() {
  std::vector<wanfw::OptionSpec> options = wan::dimension_options("teacher_", "tiny");
  const std::vector<wanfw::OptionSpec> teacher = {
      option("teacher_weights", T::String)
          .value("\"\"")
          .doc("The teacher's checkpoint (official or diffusers layout, or `wanfw export`'s output). Required."),
      option("teacher_weights_subfolder", T::String)
          .value("transformer")
          .doc("Subfolder of a diffusers pipeline folder."),
      option("teacher_expert", T::Choice)
          .value("none")
          .choices({"none", "high_noise", "low_noise", "both"})
          .doc("Two-expert presets (A14B): the expert that teaches; timesteps stay on its side of the boundary. "
               "both (objective dmd, shared_base): the generator and the critic get adapters on each expert, and "
               "every pass runs a sample on the expert that owns its level."),
      option("teacher_boundary", T::Number).value("0").doc("Timestep splitting the experts; 0 takes the preset's."),
      option("teacher_dtype", T::Choice)
          .value("float32")
          .choices({"float32", "bfloat16"})
          .doc("The teacher's weights and compute dtype; bfloat16 halves its memory."),
      wan::base_dtype_option("teacher_", "the whole frozen teacher"),
      option("teacher_device", T::String)
          .value("\"\"")
          .doc("Where the teacher computes (cpu, cuda, cuda:N); empty: beside the student."),
      option("teacher_offload", T::Boolean)
          .value("false")
          .doc("Keep the teacher on the CPU between training steps, moved to its device for each step."),
  };
  const auto student = wan::dimension_options("student_", "", "the teacher");
  const std::vector<wanfw::OptionSpec> rest = {
      option("student_init", T::Choice)
          .value("teacher")
          .choices({"teacher", "random", "weights"})
          .doc("teacher: every tensor whose shape matches is copied, a shallower student takes evenly spaced "
               "teacher blocks; random: the official initialisation; weights: student_weights."),
      option("student_weights", T::String).value("\"\"").doc("The student's checkpoint for student_init: weights."),
      option("student_weights_subfolder", T::String)
          .value("transformer")
          .doc("Subfolder of a diffusers pipeline folder."),
      option("dtype", T::Choice)
          .value("float32")
          .choices({"float32", "bfloat16"})
          .doc("Dtype of the student's weights and activations."),
      wan::base_dtype_option("", "the student's, and under dmd the critic's, base below their adapters; dmd's "
                                 "shared base"),
      option("gradient_checkpointing", T::Boolean).value("false").doc("Recompute the student's blocks in backward."),
      wan::activation_offload_option(),
      wan::recompute_chunks_option(),
      wan::attention_option(),
      option("task", T::Choice)
          .value("t2v")
          .choices({"t2v", "ti2v", "i2v"})
          .doc("As in wan22_flow_matching, for teacher and student alike."),
      option("inputs", T::Choice)
          .value("data")
          .choices({"data", "teacher_trajectory", "generator"})
          .doc("data: x_t = (1 - s) x0 + s eps from the data's latents; teacher_trajectory (data-free, velocity): "
               "prompts only, x_t where the teacher's own Euler steps from noise reach s; generator (data-free, dmd): "
               "prompts only, the generator's own steps from noise (backward simulation)."),
      option("trajectory_steps", T::Integer)
          .value("4")
          .doc("Teacher Euler steps from noise to x_t (teacher_trajectory)."),
      option("latent_size", T::String)
          .value("\"\"")
          .doc("Latent frames x height x width (\"21x60x104\") of data-free t2v distillation."),
      option("velocity_weight", T::Number).value("1.0").doc("Weight of mean (v_student - target)^2."),
      option("flow_matching_weight", T::Number)
          .value("0.0")
          .doc("Weight of the ordinary flow-matching term mean (v_student - (eps - x0))^2 on data latents."),
      option("guidance_scale", T::Number)
          .value("1.0")
          .doc("The target is the teacher's guided velocity v_u + g (v_c - v_u) (the official Wan convention; g = 1: "
               "its conditional velocity), so the student needs one forward per sampling step."),
      option("negative_context", T::String)
          .value("\"\"")
          .doc("A safetensors file holding the negative prompt's embedding [L, text_dim]; empty: zeros."),
  };
  options.insert(options.end(), teacher.begin(), teacher.end());
  options.insert(options.end(), student.begin(), student.end());
  options.insert(options.end(), rest.begin(), rest.end());
  const auto dmd = dmd_options();
  options.insert(options.end(), dmd.begin(), dmd.end());
  const auto causal = wan::causal_options(
      "under objective dmd the generator trains on its own rollout (Self Forcing: each chunk's steps from noise "
      "to a step drawn once an optimizer step, the gradient through that step's forward alone), its steps "
      "generator_steps at generator_shift",
      /*own_steps=*/false);
  options.insert(options.end(), causal.begin(), causal.end());
  const auto lora = wan::lora_options("the student");
  options.insert(options.end(), lora.begin(), lora.end());
  const auto timesteps = wan::timestep_options(/*fixed=*/true);
  options.insert(options.end(), timesteps.begin(), timesteps.end());
  const auto sampler = wan::sampler_options(
      1.0, "Guidance of the student's samples; 1: one forward per step (a guidance-distilled student).",
      "Latent F x H x W `wanfw sample` draws when its inputs give no shape; empty: latent_size.");
  options.insert(options.end(), sampler.begin(), sampler.end());
  const auto vae = wan::vae_options();
  options.insert(options.end(), vae.begin(), vae.end());
  return options;
}

}  // namespace wan_distill
