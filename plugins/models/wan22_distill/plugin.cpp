// Plugin `wan22_distill`: its options, checked against each other, and the factory of the model
// (distill_model.hpp): the frozen teacher, the student and how the student starts.

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "distill_model.hpp"
#include "dmd_options.hpp"
#include "frozen_teacher.hpp"
#include "negative_context.hpp"
#include "student_init.hpp"
#include "wan/attention_backend.hpp"
#include "wan/gpu_memory.hpp"
#include "wan/lora_files.hpp"
#include "wan/wan_options.hpp"
#include "wan/wan_weights.hpp"
#include "wanfw/error.hpp"
#include "wanfw/plugin.hpp"
#include "wanfw/safetensors.hpp"

namespace {

using wanfw::option;
using T = wanfw::OptionType;

struct Networks {
  wan::WanConfig teacher, student;
  wan::Expert expert = wan::Expert::None;
  double boundary = 0;  ///< sigma units
};

Networks networks_from(const wanfw::Options& o) {
  Networks n;
  n.teacher = wan::config_from_options(o, "teacher_");
  n.student = wan::config_from_options(o, "student_", &n.teacher);
  const auto& t = n.teacher;
  const auto& s = n.student;
  if (s.in_dim != t.in_dim || s.out_dim != t.out_dim || s.patch != t.patch)
    o.fail("student_preset",
           fmt::format("the student must share the teacher's latent space: in/out channels {}/{} and patch {}x{}x{}, "
                       "the student has {}/{} and {}x{}x{}",
                       t.in_dim, t.out_dim, t.patch[0], t.patch[1], t.patch[2], s.in_dim, s.out_dim, s.patch[0],
                       s.patch[1], s.patch[2]),
           "leave student_preset empty (the teacher's) and change depth or width: student_num_layers, student_dim, "
           "student_ffn_dim, student_num_heads");
  if (s.text_dim != t.text_dim)
    o.fail("student_text_dim", fmt::format("the student reads the teacher's text embeddings ({} wide), not {}",
                                           t.text_dim, s.text_dim));
  n.expert = wan::parse_expert(o.string("teacher_expert"));
  const double boundary =
      o.number("teacher_boundary") > 0 ? o.number("teacher_boundary") : static_cast<double>(t.expert_boundary);
  if (n.expert == wan::Expert::None && t.expert_boundary > 0)
    o.fail("teacher_expert",
           fmt::format("teacher preset {} is two experts split at t = {}: say which one teaches", t.preset,
                       t.expert_boundary),
           "set teacher_expert to high_noise or low_noise");
  if (n.expert != wan::Expert::None) {
    if (!(boundary > 0 && boundary < 1000))
      o.fail("teacher_boundary", "an expert teacher needs a boundary between 0 and 1000",
             "set teacher_boundary (875 for Wan2.2 T2V-A14B, 900 for I2V-A14B)");
    n.boundary = boundary / 1000.0;
  }
  return n;
}

/// `read_files`: false for validate / model-info, which check options without reading the
/// negative prompt's file (it may live on the training machine only).
wan_distill::DistillSettings settings_from(const wanfw::Options& o, const Networks& n, bool read_files) {
  wan_distill::DistillSettings s;
  s.task = o.string("task");
  for (const auto& [name, config] : {std::pair{"teacher", &n.teacher}, {"student", &n.student}})
    if (config->in_dim != wan::task_in_dim(*config, s.task))
      o.fail("task", fmt::format("the {} task feeds the {} {} input channels, but its in_dim is {}", s.task, name,
                                 wan::task_in_dim(*config, s.task), config->in_dim),
             s.task == "i2v" ? "use an i2v teacher (wan2.2-i2v-a14b), or set teacher_in_dim"
                             : "use a t2v/ti2v teacher preset, or set teacher_in_dim");
  s.inputs = o.string("inputs");
  s.velocity_weight = o.number("velocity_weight");
  s.flow_matching_weight = o.number("flow_matching_weight");
  s.guidance = o.number("guidance_scale");
  if (s.velocity_weight < 0 || s.flow_matching_weight < 0 || s.velocity_weight + s.flow_matching_weight <= 0)
    o.fail("velocity_weight", "the objective's weights must be >= 0 and not both 0");
  if (s.guidance <= 0) o.fail("guidance_scale", "must be positive (1: the teacher's conditional prediction)");
  if (read_files) s.negative = wan_distill::negative_context(o, n.teacher);
  s.trajectory_steps = o.integer("trajectory_steps");
  if (s.trajectory_steps < 1) o.fail("trajectory_steps", "must be at least 1");
  s.latent_size = wan::bucket_option(o, "latent_size");
  if (s.inputs == "generator" && o.string("objective") != "dmd")
    o.fail("inputs", "inputs: generator (the generator's own steps) belongs to objective dmd",
           "set objective: dmd, or inputs: teacher_trajectory for data-free velocity distillation");
  if (s.inputs != "data") {
    if (s.flow_matching_weight > 0)
      o.fail("flow_matching_weight",
             fmt::format("data-free distillation (inputs: {}) has no data latents for a flow-matching term", s.inputs),
             "set flow_matching_weight: 0, or inputs: data");
    if (s.task == "ti2v")
      o.fail("inputs", "ti2v keeps the data's first frame clean: it needs inputs: data");
    if (s.task == "t2v" && !s.latent_size)
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
  s.lora = wan::lora_settings_from(o, n.student, wan::Expert::None);
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

torch::Dtype dtype_of(const wanfw::Options& o, const char* name) {
  return o.string(name) == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
}

std::unique_ptr<wanfw::Model> make_model(const wanfw::Options& o, const wanfw::PluginContext& ctx) {
  const Networks n = networks_from(o);
  wan::use_attention_backend(wan::parse_attention_backend(o.string("attention")));
  wan_distill::DistillSettings settings = settings_from(o, n, true);
  const std::string teacher_weights = o.string("teacher_weights");
  if (teacher_weights.empty())
    o.fail("teacher_weights", "a teacher needs its weights",
           "point teacher_weights at an official or diffusers Wan checkpoint (or `wanfw export`'s output)");
  const wan_distill::TeacherPlacement where{teacher_device(o, ctx.device), dtype_of(o, "teacher_dtype"),
                                            o.boolean("teacher_offload")};
  auto teacher = std::make_shared<wan_distill::FrozenTeacher>(n.teacher, n.expert, n.boundary, where);
  teacher->load_weights(teacher_weights, o.string("teacher_weights_subfolder"));
  spdlog::info("teacher: {} blocks, dim {} ({}), frozen on {} in {}{}", n.teacher.num_layers, n.teacher.dim,
               teacher_weights, where.device.str(), o.string("teacher_dtype"),
               where.offload ? ", on the CPU between steps" : "");

  const wan::WanPlacement placement{ctx.device, dtype_of(o, "dtype")};
  if (o.string("objective") == "dmd") {
    wan_distill::DmdSettings dmd = wan_distill::dmd_settings_from(o, n.student, n.teacher, settings, false);
    wan::WanDiT generator(n.student, placement);
    wan_distill::initialise_student(o, *generator, *teacher);
    wan::apply_lora(*generator, settings.lora, "");
    return wan_distill::make_dmd_model(o, std::move(generator), std::move(teacher), std::move(settings),
                                       std::move(dmd), placement);
  }
  auto model = std::make_unique<wan_distill::DistillModel>(n.student, std::move(settings), teacher, placement);
  auto& student = *model->student();
  wan_distill::initialise_student(o, student, *teacher);
  wan::apply_lora(student, model->settings().lora, "");
  student.set_gradient_checkpointing(o.boolean("gradient_checkpointing"));
  return model;
}

std::string inspect(const wanfw::Options& o, const wanfw::TrainingLayout& layout) {
  const Networks n = networks_from(o);
  const wan_distill::DistillSettings s = settings_from(o, n, false);
  const auto blocks = wan_distill::block_mapping(n.student.num_layers, n.teacher.num_layers);
  std::vector<std::string> pairs;
  for (std::size_t i = 0; i < blocks.size(); ++i) pairs.push_back(fmt::format("{}<-{}", i, blocks[i]));
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double teacher_bytes = static_cast<double>(n.teacher.parameter_count()) *
                               (o.string("teacher_dtype") == "bfloat16" ? 2 : 4);
  std::string weights_line = wan::describe_weights("teacher weights", n.teacher, o.string("teacher_weights"),
                                                   o.string("teacher_weights_subfolder"), n.expert);
  const std::string negative = o.string("negative_context");
  if (!negative.empty() && !std::filesystem::exists(negative))
    weights_line += fmt::format("negative context: {} is not on this machine; it is read when a run starts\n", negative);
  const std::string target = s.guidance == 1.0 ? std::string("conditional velocity")
                                               : fmt::format("guided velocity v_u + {} (v_c - v_u)", s.guidance);
  const std::string fm = s.flow_matching_weight > 0 ? fmt::format(" + {} x flow matching", s.flow_matching_weight) : "";
  const bool dmd = o.string("objective") == "dmd";
  const std::string objective =
      dmd ? std::string("objective dmd (the student is the generator)")
          : fmt::format("target: the teacher's {}; loss = {} x velocity{}", target, s.velocity_weight, fm);
  const std::string dmd_lines =
      dmd ? wan_distill::dmd_summary(o, n.student, n.teacher, s, n.expert != wan::Expert::None) : std::string();
  return fmt::format(
      "teacher: preset {}, dim {}, {} layers, {} parameters, frozen: {:.2f} GiB in {} (no gradients, no optimizer "
      "state){}\n"
      "student: dim {}, {} layers, {} parameters, trained in {} ({})\n"
      "student blocks from the teacher's (student<-teacher): {}\n"
      "student {}student {}"
      "task {}, inputs {}; {}\n{}",
      n.teacher.preset, n.teacher.dim, n.teacher.num_layers, wan::with_thousands(n.teacher.parameter_count()), teacher_bytes / kGiB,
      o.string("teacher_dtype"),
      n.expert == wan::Expert::None ? "" : fmt::format(", the {} expert", o.string("teacher_expert")), n.student.dim,
      n.student.num_layers, wan::with_thousands(n.student.parameter_count()), o.string("dtype"), o.string("student_init"),
      fmt::join(pairs, " "),
      wan::training_memory(n.student, s.lora, o.string("dtype"), 1, o.boolean("gradient_checkpointing")),
      wan::gpu_memory(n.student, s.lora, o.string("dtype"), 1, o.boolean("gradient_checkpointing"), layout), s.task,
      s.inputs, objective, weights_line) + dmd_lines;
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_model(
      "wan22_distill", "0.1.0",
      "Distils a frozen Wan teacher into a smaller, shallower or guidance-free Wan student.");
  d.options = wan::dimension_options("teacher_", "tiny");
  const std::vector<wanfw::OptionSpec> teacher = {
      option("teacher_weights", T::String)
          .value("\"\"")
          .doc("The teacher's checkpoint (official or diffusers layout, or `wanfw export`'s output). Required."),
      option("teacher_weights_subfolder", T::String).value("transformer").doc("Subfolder of a diffusers pipeline folder."),
      option("teacher_expert", T::Choice)
          .value("none")
          .choices({"none", "high_noise", "low_noise"})
          .doc("Two-expert presets (A14B): the expert that teaches; timesteps stay on its side of the boundary."),
      option("teacher_boundary", T::Number).value("0").doc("Timestep splitting the experts; 0 takes the preset's."),
      option("teacher_dtype", T::Choice)
          .value("float32")
          .choices({"float32", "bfloat16"})
          .doc("The teacher's weights and compute dtype; bfloat16 halves its memory."),
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
      option("student_weights_subfolder", T::String).value("transformer").doc("Subfolder of a diffusers pipeline folder."),
      option("dtype", T::Choice)
          .value("float32")
          .choices({"float32", "bfloat16"})
          .doc("Dtype of the student's weights and activations."),
      option("gradient_checkpointing", T::Boolean).value("false").doc("Recompute the student's blocks in backward."),
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
      option("trajectory_steps", T::Integer).value("4").doc("Teacher Euler steps from noise to x_t (teacher_trajectory)."),
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
  d.options.insert(d.options.end(), teacher.begin(), teacher.end());
  d.options.insert(d.options.end(), student.begin(), student.end());
  d.options.insert(d.options.end(), rest.begin(), rest.end());
  const auto dmd = wan_distill::dmd_options();
  d.options.insert(d.options.end(), dmd.begin(), dmd.end());
  const auto lora = wan::lora_options("the student");
  d.options.insert(d.options.end(), lora.begin(), lora.end());
  const auto timesteps = wan::timestep_options(/*fixed=*/true);
  d.options.insert(d.options.end(), timesteps.begin(), timesteps.end());
  const auto sampler = wan::sampler_options(
      1.0, "Guidance of the student's samples; 1: one forward per step (a guidance-distilled student).",
      "Latent F x H x W `wanfw sample` draws when its inputs give no shape; empty: latent_size.");
  d.options.insert(d.options.end(), sampler.begin(), sampler.end());
  d.make_model = make_model;
  d.inspect_model = inspect;
  return d;
}

}  // namespace

WANFW_PLUGIN(Model, describe)
