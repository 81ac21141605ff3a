// The memory plan's weight terms (wan/memory_plan.hpp) against the tensors a built model holds:
// the resident blocks' bytes in bfloat16 and in fp8 with scales, and the host bytes block swap
// streams, counted from the real modules.

#include <torch/torch.h>

#include "units/block_swap.hpp"
#include "wan/lora.hpp"
#include "wan/memory_plan.hpp"
#include "wan/wan_dit.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

double part(const wan::MemoryEstimate& e, const std::string& starts) {
  for (const auto& [what, bytes] : e.device_parts)
    if (what.rfind(starts, 0) == 0) return bytes;
  for (const auto& [what, bytes] : e.host_parts)
    if (what.rfind(starts, 0) == 0) return bytes;
  FAIL("no part starts with " << starts);
  return 0;
}

/// Bytes of the frozen parameters of `dit`'s blocks, as the model holds them.
double block_bytes(wan::WanDiTImpl& dit) {
  double bytes = 0;
  for (const auto& p : dit.blocks->parameters())
    if (!p.requires_grad()) bytes += static_cast<double>(p.nbytes());
  return bytes;
}

}  // namespace

TEST_CASE("the memory plan's block bytes are those of the built blocks, in bfloat16 and in fp8 with scales") {
  wan::WanConfig config = wan::wan_preset("tiny");
  config.dim = 128;  // 64 divides every input size: block-64 scales, as the real presets have
  config.ffn_dim = 256;
  config.num_heads = 4;
  wan::LoraSettings lora;
  lora.rank = 4;
  lora.alpha = 4;
  lora.targets = {"blocks.*"};
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
  wan::LoraSettings lora;
  lora.rank = 4;
  lora.alpha = 4;
  lora.targets = {"blocks.*"};
  wan::WanDiT dit(config, wan::WanPlacement{torch::kCPU, torch::kFloat32, true});
  wan::attach_adapters(*dit, lora);
  const double per_block = block_bytes(*dit) / 4;
  const wanfw::BlockSwap swap(*dit, dit->shard_units(""), {3, 2}, torch::kCPU);
  const wan::PlannedRun run{config, lora, "float32", 1, wan::Task::T2V};
  const wan::MemoryEstimate e = estimate_memory(run, {true, true, false, 3, 2}, {});
  CHECK(part(e, "streamed blocks' weights") == 3 * per_block);
  CHECK(part(e, "1 resident block(s)") + part(e, "2 slot(s)") == 3 * per_block);
  // The arena aligns each tensor to 256 bytes: within that of the plan.
  CHECK(static_cast<double>(swap.unit_bytes()) >= per_block);
  CHECK(static_cast<double>(swap.unit_bytes()) <= per_block + 256.0 * dit->blocks[0]->parameters().size());
}
