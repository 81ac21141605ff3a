// The bytes a sharded step sends (model-info's traffic line): fsdp's formula, the one
// bench/fsdp_vs_ddp.py measures on the loopback, for plain sharding over every rank and for
// hybrid sharding (fsdp replicate) within a replica group and across the groups.

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "wan/lora.hpp"
#include "wan/memory_estimate.hpp"
#include "wan/memory_plan.hpp"

namespace wan {

namespace {

/// A rank's bytes sent for a ring collective of `bytes` over `ranks` ranks: (n - 1) / n of it.
double ring(double bytes, int ranks) { return ranks > 1 ? bytes * (ranks - 1) / ranks : 0.0; }

}  // namespace

std::string shard_traffic(const PlannedRun& run, const wanfw::TrainingLayout& layout) {
  if (!layout.sharded || layout.gpus < 2) return "";
  // Each network's ranks: its group's under network groups (one network a group), else every GPU.
  const int holders = layout.network_groups.empty() ? layout.gpus : layout.network_groups.front();
  const int models = layout.network_groups.empty() ? run.models : 1;
  const int replicas = std::max(1, layout.replica_groups), shards = std::max(1, holders / replicas);
  const double parameters = static_cast<double>(run.config.parameter_count()) * models;
  const double trained =
      run.lora.enabled() ? static_cast<double>(adapter_parameter_count(run.config, run.lora)) * models : parameters;
  // Gathers in the compute dtype (bf16 under autocast, else the weights'), gradients reduced in float32.
  const double gathered = parameters * (layout.dtype != at::kFloat ? 2.0 : bytes_per_value(run.dtype));
  const double reduced = trained * 4.0;
  // Units: gathered for forward and again for backward, their gradients reduce-scattered.
  const auto sharded_step = [&](int ranks) { return ring(2 * gathered, ranks) + ring(reduced, ranks); };
  const std::string plain =
      fmt::format("sharded over all {} ranks {:.2f} GiB, every ring spanning them", holders, sharded_step(holders) / kGiB);
  if (replicas == 1)
    return fmt::format("  traffic a step per GPU (gathers forward and backward, gradients reduce-scattered): {}\n",
                       plain);
  // A shard's reduced gradient averaged across the groups: an all-reduce of 1/shards of the gradient.
  const double across = 2 * ring(reduced / shards, replicas);
  return fmt::format(
      "  traffic a step per GPU (gathers forward and backward, gradients reduce-scattered, each shard averaged "
      "across the {} replica groups): {:.2f} GiB within a group of {} ranks, {:.2f} GiB across groups; plain {}\n",
      replicas, sharded_step(shards) / kGiB, shards, across / kGiB, plain);
}

}  // namespace wan
