// Plugin `wan22_distill`: the factory of its models (the velocity objective's DistillModel,
// distill_model.hpp, or objective dmd's DmdModel, dmd/dmd_model.hpp) from its options
// (distill_options.hpp), and its `wanfw model-info` text.

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "distill_memory.hpp"
#include "distill_model.hpp"
#include "distill_options.hpp"
#include "dmd/dmd_assembly.hpp"
#include "dmd/dmd_schema.hpp"
#include "dmd/dmd_summary.hpp"
#include "networks/frozen_teacher.hpp"
#include "networks/student_init.hpp"
#include "wan/attention_backend.hpp"
#include "wan/lora.hpp"
#include "wan/memory_options.hpp"
#include "wan/memory_plan.hpp"
#include "wan/vae/vae_decoding.hpp"
#include "wan/wan_options.hpp"
#include "wan/wan_weights.hpp"
#include "wanfw/log.hpp"
#include "wanfw/plugin.hpp"

namespace {

std::unique_ptr<wanfw::Model> make_model(const wanfw::Options& o, const wanfw::PluginContext& ctx) {
  const wan_distill::Networks n = wan_distill::networks_from(o);
  wan::check_vae_option(o, n.student.out_dim, true);  // before the weights: a wrong VAE costs no load
  wan::check_block_swap_needs(o, ctx.layout);
  wan::use_attention_backend(wan::parse_attention_backend(o.string("attention")));
  wan_distill::DistillSettings settings = wan_distill::settings_from(o, n, true);
  wan::warn_chunks_beyond_tokens(o, ctx.layout, n.student.patch);
  const double planned_bytes =
      settings.lora.enabled() && !ctx.layout.sharded
          ? wan::estimate_memory(wan_distill::planned_run(o, n, settings, ctx.layout), wan::configured_memory(o, ctx.layout),
                                 wan_distill::planned_layout(ctx.layout, settings))
                .device
          : 0;
  const std::string teacher_weights = o.string("teacher_weights");
  if (teacher_weights.empty())
    o.fail("teacher_weights", "a teacher needs its weights",
           "point teacher_weights at an official or diffusers Wan checkpoint (or `wanfw export`'s output)");
  const auto make_teacher = [&] {
    const wan_distill::TeacherPlacement where{wan_distill::teacher_device(o, ctx.train_device),
                                              o.dtype("teacher_dtype"), o.boolean("teacher_offload"),
                                              settings.teacher_fp8};
    auto teacher = std::make_shared<wan_distill::FrozenTeacher>(n.teacher, n.expert, n.boundary, where);
    teacher->load_weights(teacher_weights, o.string("teacher_weights_subfolder"));
    wanfw::log::info(fmt::format("teacher: {} blocks, dim {} ({}), frozen on {} in {}{}", n.teacher.num_layers,
                                 n.teacher.dim, teacher_weights, where.device.str(), o.string("teacher_dtype"),
                                 where.offload ? ", on the CPU between steps" : ""));
    return teacher;
  };

  const wan::WanPlacement placement{ctx.device, o.dtype("dtype"), settings.fp8_base};
  wan::log_memory_options(o, ctx.layout);
  if (settings.objective == wan_distill::Objective::Dmd) {
    wan_distill::DmdSettings dmd = wan_distill::dmd_settings_from(o, n.student, n.teacher, settings, n.expert);
    // Both experts of a two-expert teacher: a generator expert for each (dmd_settings_from
    // allows it on a shared base only).
    const wan::Expert experts = n.expert == wan::Expert::Both ? wan::Expert::Both : wan::Expert::None;
    wan::WanDenoiser generator(n.student, experts, n.boundary, placement);
    std::shared_ptr<wan_distill::FrozenTeacher> teacher;
    if (dmd.shared_base) {  // the teacher's weights once, as the generator's base: no copy of them is built
      wan_distill::prepare_shared_base(o, generator, settings.lora);
      wanfw::log::info(fmt::format("teacher: {} blocks, dim {} ({}), loaded once as the shared base{}",
                                   n.teacher.num_layers, n.teacher.dim, teacher_weights,
                                   experts == wan::Expert::Both ? " of each expert" : ""));
    } else {
      teacher = make_teacher();
      wan_distill::prepare_student(o, generator, *teacher, settings.lora);
    }
    auto model = wan_distill::make_dmd_model(o, std::move(generator), std::move(teacher), std::move(settings),
                                             std::move(dmd), placement);
    model->set_planned_device_bytes(planned_bytes);
    return model;
  }
  auto teacher = make_teacher();
  auto model = std::make_unique<wan_distill::DistillModel>(n.student, std::move(settings), teacher, placement);
  wan_distill::prepare_student(o, *model->student(), *teacher, model->settings().lora);
  model->set_planned_device_bytes(planned_bytes);
  return model;
}

std::string inspect(const wanfw::Options& o, const wanfw::TrainingLayout& layout) {
  const wan_distill::Networks n = wan_distill::networks_from(o);
  wan::check_vae_option(o, n.student.out_dim, false);  // `wanfw validate`: the VAE's headers, not its values
  wan::check_block_swap_needs(o, layout);
  const wan_distill::DistillSettings s = wan_distill::settings_from(o, n, false);
  wan::warn_chunks_beyond_tokens(o, layout, n.student.patch);
  const bool dmd = s.objective == wan_distill::Objective::Dmd;
  // Every option is checked before any file is read: a refusal names the option first.
  const std::string dmd_lines = dmd ? wan_distill::dmd_summary(o, n.student, n.teacher, s, n.expert) : std::string();
  const auto blocks = wan_distill::block_mapping(n.student.num_layers, n.teacher.num_layers);
  std::vector<std::string> pairs;
  for (std::size_t i = 0; i < blocks.size(); ++i) pairs.push_back(fmt::format("{}<-{}", i, blocks[i]));
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double teacher_bytes = static_cast<double>(n.teacher.parameter_count()) *
                               wan::bytes_per_value(o.string("teacher_dtype")) *
                               (n.expert == wan::Expert::Both ? 2 : 1);
  std::string weights_line = wan::describe_weights("teacher weights", n.teacher, o.string("teacher_weights"),
                                                   o.string("teacher_weights_subfolder"), n.expert);
  const std::string negative = o.string("negative_context");
  if (!negative.empty() && !std::filesystem::exists(negative))
    weights_line += fmt::format("negative context: {} is not on this machine; it is read when a run starts\n", negative);
  const std::string target = s.guidance == 1.0 ? std::string("conditional velocity")
                                               : fmt::format("guided velocity v_u + {} (v_c - v_u)", s.guidance);
  const std::string fm = s.flow_matching_weight > 0 ? fmt::format(" + {} x flow matching", s.flow_matching_weight) : "";
  const std::string objective =
      dmd ? std::string("objective dmd (the student is the generator)")
          : fmt::format("target: the teacher's {}; loss = {} x velocity{}", target, s.velocity_weight, fm);
  // The memory plan counts every network a step holds.
  const std::string plan = wan::memory_plan(wan_distill::planned_run(o, n, s, layout), wan::configured_memory(o, layout),
                                            wan_distill::planned_layout(layout, s));
  const std::string memory = wan::adapter_summary(n.student, s.lora, 1);
  return fmt::format(
             "teacher: preset {}, dim {}, {} layers, {} parameters, frozen: {:.2f} GiB in {} (no gradients, no "
             "optimizer "
             "state){}\n"
             "student: dim {}, {} layers, {} parameters, trained in {} ({})\n"
             "student blocks from the teacher's (student<-teacher): {}\n"
             "student {}"
             "task {}, inputs {}; {}\n{}",
             n.teacher.preset, n.teacher.dim, n.teacher.num_layers, wan::with_thousands(n.teacher.parameter_count()),
             teacher_bytes / kGiB, o.string("teacher_dtype"),
             n.expert == wan::Expert::None   ? ""
             : n.expert == wan::Expert::Both ? fmt::format(", both experts (high noise at t >= {:g}), each of these dimensions", n.boundary * 1000)
                                             : fmt::format(", the {} expert", o.string("teacher_expert")),
             n.student.dim, n.student.num_layers, wan::with_thousands(n.student.parameter_count()), o.string("dtype"),
             o.string("student_init"), fmt::join(pairs, " "),
             memory.empty() ? std::string("trained whole\n") : memory,
             wan::task_name(s.task), wan_distill::inputs_name(s.inputs), objective, weights_line) +
         dmd_lines + plan;
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_model(
      "wan22_distill", "0.1.0", "Distils a frozen Wan teacher into a smaller, shallower or guidance-free Wan student.");
  d.options = wan_distill::distill_options();
  d.model_capabilities.replicates = true;
  d.make_model = make_model;
  d.inspect_model = inspect;
  d.make_decoder = wan::make_vae_decoder;
  return d;
}

}  // namespace

WANFW_PLUGIN(Model, describe)
