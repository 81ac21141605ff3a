#include "networks/student_init.hpp"

#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "wan/lora_files.hpp"
#include "wan/memory_options.hpp"
#include "wan/wan_weights.hpp"
#include "wanfw/log.hpp"
#include "wanfw/sample_random.hpp"

namespace wan_distill {

std::vector<std::int64_t> block_mapping(std::int64_t student_layers, std::int64_t teacher_layers) {
  std::vector<std::int64_t> blocks;
  for (std::int64_t i = 0; i < student_layers; ++i) {
    if (student_layers == 1 || teacher_layers == 1) {
      blocks.push_back(0);
      continue;
    }
    const double at = static_cast<double>(i) * static_cast<double>(teacher_layers - 1) /
                      static_cast<double>(student_layers - 1);
    blocks.push_back(static_cast<std::int64_t>(std::lround(at)));
  }
  return blocks;
}

namespace {
/// "blocks.3.ffn.0.weight" -> the teacher's name for it under `blocks`.
std::string teacher_name(const std::string& name, const std::vector<std::int64_t>& blocks) {
  const std::string prefix = "blocks.";
  if (name.rfind(prefix, 0) != 0) return name;
  const auto dot = name.find('.', prefix.size());
  const auto index = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
  return prefix + std::to_string(blocks.at(static_cast<std::size_t>(index))) + name.substr(dot);
}
}  // namespace

StudentInit init_from_teacher(wan::WanDiTImpl& student, const wan::WanDiTImpl& teacher) {
  torch::NoGradGuard no_grad;
  StudentInit out;
  out.blocks = block_mapping(student.config().num_layers, teacher.config().num_layers);
  // Linear layers where either base is fp8 copy layer by layer (values and scales together).
  std::map<std::string, const wan::WanLinearImpl*> teacher_layers;
  for (const auto& item : teacher.named_modules())
    if (const auto* layer = item.value()->as<wan::WanLinearImpl>()) teacher_layers[item.key()] = layer;
  std::set<std::string> done;
  for (const auto& item : student.named_modules()) {
    auto* layer = item.value()->as<wan::WanLinearImpl>();
    if (layer == nullptr) continue;
    const auto it = teacher_layers.find(teacher_name(item.key(), out.blocks));
    if (it == teacher_layers.end() || !(layer->fp8_base() || it->second->fp8_base())) continue;
    for (const char* part : {".weight", ".weight_scale", ".bias"}) done.insert(item.key() + part);
    if (it->second->in_features() != layer->in_features() || it->second->out_features() != layer->out_features()) {
      out.kept.push_back(item.key() + ".weight");
      continue;
    }
    layer->copy_base_from(*it->second);
    out.copied += 2;
  }
  std::map<std::string, torch::Tensor> source;
  for (const auto& item : teacher.named_parameters()) source[item.key()] = item.value();
  for (const auto& item : teacher.named_buffers()) source[item.key()] = item.value();
  auto copy = [&](const std::string& name, torch::Tensor& target) {
    if (done.count(name)) return;
    const auto it = source.find(teacher_name(name, out.blocks));
    if (it == source.end() || it->second.sizes() != target.sizes()) {
      out.kept.push_back(name);
      return;
    }
    target.copy_(it->second);
    ++out.copied;
  };
  for (auto& item : student.named_parameters()) copy(item.key(), item.value());
  for (auto& item : student.named_buffers()) copy(item.key(), item.value());
  return out;
}

void initialise_student(const wanfw::Options& o, wan::WanDiTImpl& student, const FrozenTeacher& teacher,
                        std::size_t index) {
  const std::string init = o.string("student_init");
  if (init == "teacher") {
    const StudentInit done = init_from_teacher(student, *teacher.dits().at(index));
    std::vector<std::string> pairs;
    for (std::size_t i = 0; i < done.blocks.size(); ++i) pairs.push_back(fmt::format("{}<-{}", i, done.blocks[i]));
    wanfw::log::info(
        fmt::format("student initialised from the teacher: {} tensors copied, {} kept their initialisation (other "
                    "shapes){}; blocks (student<-teacher): {}",
                    done.copied, done.kept.size(), done.kept.empty() ? "" : fmt::format(", e.g. {}", done.kept.front()),
                    fmt::join(pairs, " ")));
  } else if (init == "weights") {
    const std::string weights = o.string("student_weights");
    if (weights.empty()) o.fail("student_weights", "student_init: weights needs student_weights");
    torch::NoGradGuard no_grad;
    wan::load_wan_weights(student, weights, o.string("student_weights_subfolder"));
  }
}

namespace {
void set_memory_options(const wanfw::Options& o, wan::WanDiTImpl& student) {
  student.set_gradient_checkpointing(o.boolean("gradient_checkpointing"));
  student.set_activation_offload(wan::activation_offload_from(o));
  student.set_recompute_chunks(wan::recompute_chunks_from(o));
}
}  // namespace

SeededDraws::SeededDraws(const char* what) : run_seed_(at::detail::getDefaultCPUGenerator().current_seed()) {
  torch::manual_seed(wanfw::mix_seed(wanfw::sample_stream_seed(run_seed_, 0, 0, what)));
}

SeededDraws::~SeededDraws() { torch::manual_seed(run_seed_); }

void prepare_student(const wanfw::Options& o, wan::WanDiTImpl& student, const FrozenTeacher& teacher,
                     const wan::LoraSettings& lora) {
  initialise_student(o, student, teacher);
  {
    const SeededDraws draws("student adapters");
    wan::apply_lora(student, lora, "");
  }
  set_memory_options(o, student);
}

void prepare_student(const wanfw::Options& o, wan::WanDenoiser& student, const FrozenTeacher& teacher,
                     const wan::LoraSettings& lora) {
  auto dits = student.dits();
  for (std::size_t i = 0; i < dits.size(); ++i) initialise_student(o, *dits[i], teacher, i);
  {
    const SeededDraws draws("student adapters");
    student.apply_lora(lora);
  }
  for (auto& dit : dits) set_memory_options(o, *dit);
}

void prepare_shared_base(const wanfw::Options& o, wan::WanDenoiser& student, const wan::LoraSettings& lora) {
  {
    torch::NoGradGuard no_grad;
    student.load_weights(o.string("teacher_weights"), o.string("teacher_weights_subfolder"));
  }
  {
    const SeededDraws draws("student adapters");
    student.apply_lora(lora);
  }
  for (auto& dit : student.dits()) set_memory_options(o, *dit);
}

}  // namespace wan_distill
