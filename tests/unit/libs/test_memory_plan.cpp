// The memory plan's weight terms (wan/memory_plan.hpp) against the tensors a built model holds:
// the resident blocks' bytes in bfloat16 and in fp8 with scales, and the host bytes block swap
// streams, counted from the real modules.

#include <torch/torch.h>

#include "units/block_swap.hpp"
#include "wan/lora.hpp"
#include "wan/memory_plan.hpp"
#include "wan/wan_dit.hpp"
#include "memory_plan_helpers.hpp"

namespace {

/// Bytes of the frozen parameters of `dit`'s blocks, as the model holds them.
double block_bytes(wan::WanDiTImpl& dit) {
  double bytes = 0;
  for (const auto& p : dit.blocks->parameters())
    if (!p.requires_grad()) bytes += static_cast<double>(p.nbytes());
  return bytes;
}

}  // namespace

TEST_CASE("the memory plan's block bytes are those of the built blocks, in bfloat16 and in fp8 with scales") {
  const wan::WanConfig config = wide_tiny();
  const wan::LoraSettings lora = block_adapters();
  const wanfw::TrainingLayout layout;
  for (const bool fp8 : {false, true}) {
    CAPTURE(fp8);
    wan::WanDiT dit(config, wan::WanPlacement{torch::kCPU, torch::kBFloat16, fp8});
    wan::attach_adapters(*dit, lora);
    const wan::PlannedRun run{config, lora, "bfloat16", 1, wan::Task::T2V};
    const wan::MemoryEstimate e = estimate_memory(run, {fp8, true, false, 0, 2}, layout);
    CHECK(part(e, "2 resident block(s)") == block_bytes(*dit));
    double adapters = 0;
    for (const auto& p : dit->parameters())
      if (p.requires_grad()) adapters += static_cast<double>(p.numel());
    CHECK(part(e, "adapters with gradients") == adapters * 16);
  }
}

TEST_CASE("the memory plan's streamed bytes are what block swap moves to host memory") {
  wan::WanConfig config = wan::wan_preset("tiny");
  config.num_layers = 4;
  const wan::LoraSettings lora = block_adapters();
  wan::WanDiT dit(config, wan::WanPlacement{torch::kCPU, torch::kFloat32, true});
  wan::attach_adapters(*dit, lora);
  const double per_block = block_bytes(*dit) / 4;
  const wanfw::BlockSwap swap(*dit, dit->units(""), {3, 2}, torch::kCPU);
  const wan::PlannedRun run{config, lora, "float32", 1, wan::Task::T2V};
  const wan::MemoryEstimate e = estimate_memory(run, {true, true, false, 3, 2}, {});
  CHECK(part(e, "streamed blocks' weights") == 3 * per_block);
  CHECK(part(e, "1 resident block(s)") + part(e, "2 slot(s)") == 3 * per_block);
  // The arena aligns each tensor to 256 bytes: within that of the plan.
  CHECK(static_cast<double>(swap.unit_bytes()) >= per_block);
  CHECK(static_cast<double>(swap.unit_bytes()) <= per_block + 256.0 * dit->blocks[0]->parameters().size());
}

TEST_CASE("the memory plan of a dmd run with a critic of its own counts both networks and the teacher as built") {
  wan::WanConfig student = wan::wan_preset("tiny"), teacher = wide_tiny();
  student.num_layers = 2;
  teacher.num_layers = 3;  // the critic is the teacher's architecture: wider blocks than the student's
  const wan::LoraSettings lora = block_adapters();
  const wan::WanPlacement fp8{torch::kCPU, torch::kBFloat16, true};
  wan::WanDiT generator(student, fp8), critic(teacher, fp8), frozen_teacher(teacher, fp8);
  wan::attach_adapters(*generator, lora);
  wan::attach_adapters(*critic, lora);
  double teacher_bytes = 0, adapters = 0;
  for (const auto& p : frozen_teacher->parameters()) teacher_bytes += static_cast<double>(p.nbytes());
  for (wan::WanDiT* dit : {&generator, &critic})
    for (const auto& p : (*dit)->parameters())
      if (p.requires_grad()) adapters += static_cast<double>(p.numel());
  CHECK(wan::frozen_dit_bytes(teacher, "bfloat16", true) == teacher_bytes);

  wan::PlannedRun run{student, lora, "bfloat16", 1, wan::Task::T2V};
  run.critic = teacher;
  run.critic_adapters = wan::adapter_parameter_count(teacher, lora);
  run.held.emplace_back("the frozen teacher", wan::frozen_dit_bytes(teacher, "bfloat16", true));
  const wan::MemoryEstimate resident = estimate_memory(run, {true, true, false, 0, 2}, {});
  const double blocks = block_bytes(*generator) + block_bytes(*critic);
  CHECK(part(resident, "5 resident block(s)") == blocks);
  CHECK(part(resident, "adapters with gradients") == adapters * 16);
  CHECK(part(resident, "the frozen teacher") == teacher_bytes);

  // Streamed: units 0, 2 and 4 of the generator's 2 blocks and the critic's 3, as block swap picks them.
  torch::nn::Module both;
  both.register_module("generator", generator);
  both.register_module("critic", critic);
  std::vector<wanfw::Unit> units = generator->units("generator.");
  for (auto& unit : critic->units("critic.")) units.push_back(std::move(unit));
  const wanfw::BlockSwap swap(both, units, {3, 2}, torch::kCPU);
  double streamed = 0;
  for (const std::size_t u : swap.streamed())
    for (std::size_t i = 0; i < swap.streamed_parameters(u).size(); ++i)
      streamed += static_cast<double>(swap.host_parameter(u, i).nbytes());
  const wan::MemoryEstimate e = estimate_memory(run, {true, true, false, 3, 2}, {});
  CHECK(part(e, "streamed blocks' weights") == streamed);
  CHECK(part(e, "2 resident block(s)") + streamed == blocks);
  CHECK(part(e, "2 resident block(s)") == block_bytes(*generator) + block_bytes(*critic));  // the rest: placeholders
}

TEST_CASE("a DiT trained whole is planned at its built parameters' training state, and a sharded layout at 1/G of it") {
  const wan::WanConfig config = wide_tiny();
  wan::WanDiT dit(config, wan::WanPlacement{torch::kCPU, torch::kFloat32, false});
  double values = 0, block_values = 0;
  for (const auto& p : dit->parameters()) values += static_cast<double>(p.numel());
  for (const auto& p : dit->blocks[0]->parameters()) block_values += static_cast<double>(p.numel());
  const wan::PlannedRun run{config, {}, "float32", 1, wan::Task::T2V};
  wanfw::TrainingLayout layout;
  const wan::MemoryEstimate whole = estimate_memory(run, {false, true, false, 0, 2}, layout);
  CHECK(part(whole, "training state") == values * 16);  // fp32 weight, gradient, two AdamW moments
  layout.sharded = true;
  layout.gpus = 4;
  const wan::MemoryEstimate sharded = estimate_memory(run, {false, true, false, 0, 2}, layout);
  CHECK(part(sharded, "training state") == values * 16 / 4);
  // Two blocks and the rest gathered, and a block's full gradient with the rest's, in float32.
  const double rest = values - block_values * static_cast<double>(config.num_layers);
  CHECK(part(sharded, "gathered parameters") == ((2 * block_values + rest) + (block_values + rest)) * 4);
  // The one fits rule: the device bytes and the CUDA context within the device.
  CHECK(wan::fits(sharded, sharded.device + wan::kDeviceReserve));
  CHECK_FALSE(wan::fits(sharded, sharded.device + wan::kDeviceReserve - 1));
}

TEST_CASE("the memory plan counts a VACE model's blocks as built: its VACE blocks beside the main ones, fp8 or not") {
  wan::WanConfig config = wide_tiny();
  config.num_layers = 4;
  config.vace_layers = {0, 2};
  config.vace_in_dim = 72;
  wan::LoraSettings lora = block_adapters();
  lora.targets = {"vace_blocks.*"};
  for (const bool fp8 : {false, true}) {
    CAPTURE(fp8);
    wan::WanDiT dit(config, wan::WanPlacement{torch::kCPU, torch::kBFloat16, fp8});
    wan::attach_adapters(*dit, lora);
    double vace = 0;
    for (const auto& p : dit->vace_blocks->parameters())
      if (!p.requires_grad()) vace += static_cast<double>(p.nbytes());
    const wan::PlannedRun run{config, lora, "bfloat16", 1, wan::Task::T2V};
    const wan::MemoryEstimate e = estimate_memory(run, {fp8, true, false, 0, 2}, {});
    CHECK(part(e, "6 resident block(s)") == block_bytes(*dit) + vace);
  }
}

TEST_CASE("a VACE branch trained whole is planned at its parameters' training state beside the frozen base") {
  wan::WanConfig config = wan::wan_preset("tiny-vace");
  wan::WanDiT dit(config, wan::WanPlacement{torch::kCPU, torch::kFloat32, false, true});
  double branch = 0, rest = 0;
  for (const auto& item : dit->named_parameters())
    if (item.key().rfind("vace_", 0) == 0) branch += static_cast<double>(item.value().numel());
    else if (item.key().rfind("blocks.", 0) != 0) rest += static_cast<double>(item.value().nbytes());
  const wan::PlannedRun run{config, {}, "float32", 1, wan::Task::T2V};
  const wan::MemoryEstimate e = estimate_memory(run, {false, true, false, 0, 2}, {});
  CHECK(part(e, "the VACE branch's training state") == branch * 16);  // fp32 weight, gradient, two moments
  CHECK(part(e, "weights outside the blocks") == rest);
  double blocks = 0;  // the main blocks, frozen
  for (const auto& p : dit->blocks->parameters()) blocks += static_cast<double>(p.nbytes());
  CHECK(part(e, "4 resident block(s)") == blocks);
}
