// The memory plan with the optimizer's state on the host (wan/memory_plan.hpp): what a trained
// parameter leaves on the device and costs the host, the gradients the device holds while they move,
// fsdp's share of each, and block swap streaming the trained blocks of a DiT trained whole; counted
// from the real modules.

#include <torch/torch.h>

#include "units/block_swap.hpp"
#include "wan/wan_dit.hpp"
#include "memory_plan_helpers.hpp"

namespace {

/// The parameters of a DiT built from `config` (fp32, on the CPU): all, one block's, and those in no block.
struct BuiltParameters {
  double all = 0, block = 0, rest = 0;
};
BuiltParameters built_parameters(const wan::WanConfig& config) {
  wan::WanDiT dit(config, wan::WanPlacement{torch::kCPU, torch::kFloat32, false});
  BuiltParameters out;
  for (const auto& p : dit->parameters()) out.all += static_cast<double>(p.numel());
  for (const auto& p : dit->blocks[0]->parameters()) out.block += static_cast<double>(p.numel());
  out.rest = out.all - out.block * static_cast<double>(config.num_layers);
  return out;
}

}  // namespace

TEST_CASE("the optimizer's state on the host leaves a trained parameter's weight and gradient on the device") {
  const wan::WanConfig config = wide_tiny();
  const double parameters = built_parameters(config).all;
  const wan::PlannedRun whole{config, {}, "float32", 1, wan::Task::T2V};
  wan::MemorySettings host;
  host.host_state = true;
  const wan::MemoryEstimate on_device = estimate_memory(whole, {}, {}), on_host = estimate_memory(whole, host, {});
  CHECK(part(on_device, "training state") == parameters * 16);
  CHECK(part(on_host, "the DiT trained whole: weights and gradients") == parameters * 8);  // fp32 weight, gradient
  CHECK(part(on_host, "the DiT trained whole: fp32 masters") == parameters * 16);  // master, its gradient, moments
  CHECK(on_device.device - on_host.device == parameters * 8);
  CHECK(on_host.host - on_device.host == parameters * 16);
  // bf16_weights: the bf16 weight and gradient stay; the fp32 master and moments leave.
  wanfw::TrainingLayout bf16;
  bf16.dtype = at::kBFloat16;
  bf16.master_weights = true;
  CHECK(part(estimate_memory(whole, host, bf16), "the DiT trained whole: weights and gradients") == parameters * 4);
  CHECK(part(estimate_memory(whole, {}, bf16), "training state") == parameters * 16);

  // Adapters: their float32 weights and gradients stay beside the frozen base.
  const wan::LoraSettings lora = block_adapters();
  wan::WanDiT base(config, wan::WanPlacement{torch::kCPU, torch::kFloat32, false});
  wan::attach_adapters(*base, lora);
  double adapters = 0;
  for (const auto& p : base->parameters())
    if (p.requires_grad()) adapters += static_cast<double>(p.numel());
  REQUIRE(adapters > 0);
  const wan::PlannedRun adapted{config, lora, "float32", 1, wan::Task::T2V};
  CHECK(part(estimate_memory(adapted, host, {}), "adapters (float32): weights and gradients") == adapters * 8);
  CHECK(part(estimate_memory(adapted, host, {}), "adapters (float32): fp32 masters") == adapters * 16);
  CHECK(part(estimate_memory(adapted, {}, {}), "adapters with gradients") == adapters * 16);
}

TEST_CASE("with the state on the host and a unit's gradients final at its backward's end, two blocks' gradients stay") {
  wan::WanConfig config = wide_tiny();
  config.num_layers = 6;  // two blocks of six at a time
  const auto [parameters, block, rest] = built_parameters(config);
  const wan::PlannedRun whole{config, {}, "float32", 1, wan::Task::T2V};
  wan::MemorySettings host;
  host.host_state = true;
  wanfw::TrainingLayout single;
  single.unit_gradients_final = true;
  CHECK(part(estimate_memory(whole, host, single), "the DiT trained whole: weights (4 bytes a parameter) and two "
                                                   "blocks' gradients") == parameters * 4 + (2 * block + rest) * 4);
  // Accumulated micro-batches add up on the device, and a strategy that reduces after backward
  // (ddp) holds every gradient until then.
  wanfw::TrainingLayout accumulated = single;
  accumulated.accumulation = 2;
  CHECK(part(estimate_memory(whole, host, accumulated), "the DiT trained whole: weights and gradients") == parameters * 8);
  CHECK(part(estimate_memory(whole, host, {}), "the DiT trained whole: weights and gradients") == parameters * 8);
}

TEST_CASE("fsdp with the state on the host keeps a share of the shards' gathers copy and gradients on each device") {
  wan::WanConfig config = wide_tiny();
  config.num_layers = 6;
  const auto [parameters, block, rest] = built_parameters(config);
  const wan::PlannedRun whole{config, {}, "float32", 1, wan::Task::T2V};
  wan::MemorySettings host;
  host.host_state = true;
  wanfw::TrainingLayout fsdp;  // bf16 gathers of fp32 shards over 4 GPUs, one micro-batch a step
  fsdp.sharded = true;
  fsdp.gpus = 4;
  fsdp.dtype = at::kBFloat16;
  const wan::MemoryEstimate e = estimate_memory(whole, host, fsdp);
  // The device: each shard's bf16 copy (2 bytes) and, as each unit's reduced gradients move to the
  // host, two blocks' and the rest's fp32 gradients (4 bytes); the host: the fp32 shard, its
  // gradient and the moments (16 bytes); all a quarter a GPU.
  CHECK(part(e, "the DiT trained whole: weights (2 bytes a parameter) and two blocks' gradients") ==
        (parameters * 2 + (2 * block + rest) * 4) / 4);
  CHECK(part(e, "the DiT trained whole: the shards, gradients and AdamW moments") == parameters * 16 / 4);
  const wan::TrainedBytes per = wan::trained_parameter_bytes(4, false, true, 2);
  CHECK(per.device == 6);
  CHECK(per.gradient == 4);
  CHECK(per.host == 16);
  // Accumulated micro-batches add up on the device: every shard's gradient stays until the last.
  fsdp.accumulation = 2;
  CHECK(part(estimate_memory(whole, host, fsdp), "the DiT trained whole: weights and gradients") == parameters * 6 / 4);
}

TEST_CASE("with the state on the host, block swap streams a DiT trained whole: its blocks' weights move to the host") {
  wan::WanConfig config = wide_tiny();
  config.num_layers = 6;
  const auto [parameters, block, rest] = built_parameters(config);
  const wan::PlannedRun whole{config, {}, "float32", 1, wan::Task::T2V};
  wan::MemorySettings swapped;
  swapped.host_state = true;
  swapped.swapped = 3;
  swapped.ring = 2;
  wanfw::TrainingLayout single;
  single.unit_gradients_final = true;
  const wan::MemoryEstimate e = estimate_memory(whole, swapped, single);
  // The device: 3 resident blocks' and the rest's fp32 weights, two blocks' and the rest's
  // gradients, and 2 slots of one block's weights; the host: 3 blocks' weights beside the state.
  CHECK(part(e, "the DiT trained whole: the resident blocks' weights (4 bytes a parameter) and two blocks' "
                "gradients") == (parameters - 3 * block) * 4 + (2 * block + rest) * 4);
  CHECK(part(e, "2 slot(s) of streamed blocks") == 2 * block * 4);
  CHECK(part(e, "streamed blocks' weights (pinned)") == 3 * block * 4);
  CHECK(part(e, "the DiT trained whole: fp32 masters") == parameters * 16);
  CHECK(e.host_build == e.host + parameters * 4);  // built whole on the host beside its masters
  // The state on the device streams nothing: the trained weights stay resident.
  swapped.host_state = false;
  CHECK(estimate_memory(whole, swapped, single).host == 0);
}
