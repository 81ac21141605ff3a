// Hybrid sharding (fsdp replicate R): the replica groups, and each shard's gradient averaged across
// them once a step.
#include <fmt/format.h>
#include <torch/torch.h>

#include "fsdp_strategy.hpp"
#include "wanfw/error.hpp"

namespace wanfw_fsdp {

wanfw::SessionGroups replica_groups(const wanfw::DistributedSession& holders, const FsdpSettings& settings,
                                    bool network_groups) {
  const int r = settings.replicate, holders_size = holders.world_size();
  if (r < 1 || holders_size % r != 0)
    throw wanfw::Error(
        fmt::format("strategy.replicate: {} replica groups do not split the {} ranks{} into equal groups", r,
                    holders_size, network_groups ? " of a network's group" : ""),
        "choose replicate dividing the ranks (2 nodes: replicate 2, each node's GPUs a replica group)");
  if (r == 1) return {};
  const int group = holders_size / r;
  if (group % settings.sequence_parallel != 0)
    throw wanfw::Error(
        fmt::format("strategy.replicate: a replica group of {} ranks does not hold whole sequence-parallel groups "
                    "of {}",
                    group, settings.sequence_parallel),
        "choose replicate and sequence_parallel so that world / replicate is a multiple of "
        "sequence_parallel (a sample's ranks inside one replica group)");
  if (settings.host_state)
    throw wanfw::Error(
        "strategy.replicate: optimizer.state host with replicate is not supported yet: the "
        "replicas' average of a shard's gradient runs on the device, and the host moves it "
        "during backward",
        "set replicate: 1 (shard over every rank), or optimizer.state: device");
  return holders.split(group, "replicate");
}

void FsdpStrategy::average_over_replicas() {
  if (!replicas_.across) return;
  // Each group's mean over its ranks, averaged over the groups: the mean over every rank, as one
  // group of all ranks reduces it. The same shards in the same order on every rank of the pair.
  std::vector<at::Tensor> grads;
  for (FlatShard* flat : flats())
    if (flat->trainable() && flat->reduces_gradients() && flat->shard().grad().defined())
      grads.push_back(flat->shard().grad());
  if (!grads.empty()) replicas_.across->all_reduce(grads, wanfw::Reduce::Mean);
}

}  // namespace wanfw_fsdp
