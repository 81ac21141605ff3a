#pragma once
// Networks on rank groups: a model whose networks share no parameter (the two Wan2.2 A14B
// experts) can train each on its own ranks. The job's ranks form one group per network, in the
// model's order (contiguous ranks: the first sizes[0] ranks hold network 0, and so on); each rank
// builds its group's network alone.
//
// Every sample trains exactly one network, and the model says which from the sample's own keys
// (Model::route), so every rank knows the route of every sample of a step before it loads one.
// The core deals each micro-batch's samples to the group of their network, round robin over its
// ranks (uneven counts, and none, allowed), and weighs each rank's loss by the samples it holds;
// the strategy reduces each network's gradients within its group (a sum over the group, divided
// by the data world size). So a step trains on the same samples, with the same loss
// normalisation, as one device holding every network.
//
// The rule for micro-batches: a group runs every micro-batch in which it has samples, and the
// step's last one; a rank of the group without samples of its own runs a stand-in sample at
// weight 0 (Batch::weight), so that its group's collectives (gradient buckets, fsdp's gathers)
// see every rank. A micro-batch without samples of the group is skipped by all its ranks.

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wanfw {

class DistributedSession;
struct MicroStep;

/// A network a model can hand to a rank group of its own.
struct PlaceableNetwork {
  std::string name;               ///< "high_noise": in logs, configs and model-info
  std::string checkpoint_prefix;  ///< every checkpoint tensor of this network starts with it: "high_noise_model."
};

/// Where this rank sits when the ranks form one group per network.
struct NetworkGroups {
  std::vector<int> sizes;  ///< ranks of each group, in the model's network order
  int group = 0;           ///< this rank's group: the index of the network it holds
  int rank_in_group = 0;   ///< 0 .. sizes[group] - 1

  int count() const { return static_cast<int>(sizes.size()); }
  int group_size() const { return sizes.at(static_cast<std::size_t>(group)); }
  /// The job's rank of the first rank of group `g`.
  int first_rank(int g) const {
    int first = 0;
    for (int i = 0; i < g; ++i) first += sizes.at(static_cast<std::size_t>(i));
    return first;
  }
  /// The total of sizes: the world size.
  int world_size() const { return first_rank(count()); }
  /// The layout of `rank` among groups of `sizes`. Throws wanfw::Error when the sizes are not
  /// positive or do not add up to `world_size`.
  static NetworkGroups of_rank(std::vector<int> sizes, int rank, int world_size);
};

/// What a strategy needs to place networks on rank groups (its `network_groups` option): this
/// rank's group as a session of its own, and the rules of a step. A strategy reduces each
/// network's gradients over group() (ddp: averaged by c10d; its loss scaled by loss_scale()),
/// counts every micro-batch (count), calls settle before the optimizer, and clips by
/// gradient_norm.
class NetworkPlacement {
 public:
  /// Every rank of `job` calls it with the same sizes; empty sizes: no groups (groups() is null).
  /// Throws wanfw::Error when the sizes do not add up to the job's ranks.
  NetworkPlacement(const DistributedSession& job, std::vector<int> sizes);
  ~NetworkPlacement();
  /// Null without groups.
  const NetworkGroups* groups() const { return groups_.sizes.empty() ? nullptr : &groups_; }
  /// This rank's group (null without groups).
  const DistributedSession* group() const { return group_.get(); }
  /// The factor on a rank's loss when its gradients are then averaged over its group: the group's
  /// size over the job's (data world) size, so that the group's average is the step's gradient
  /// (the sum over the network's samples over the step batch). 1 without groups.
  double loss_scale() const;
  /// A micro-batch this rank ran: its weight counts toward the step's samples (MicroStep::weight).
  void count(const MicroStep& micro);
  /// Before the optimizer steps (a collective within the group): when no rank of the group held a
  /// sample of its own this step (only stand-ins), `parameters`' gradients are dropped (undefined),
  /// so the optimizer skips the network as one device holding every network would. Returns
  /// whether the group trained.
  bool settle(const std::vector<at::Tensor>& parameters);
  /// The L2 norm of every network's gradient together, when each rank of a group holds its
  /// network's whole reduced gradient (`gradients`; undefined ones count as zero): a collective
  /// over the job. Clip by min(1, max / (norm + 1e-6)).
  double gradient_norm(const std::vector<at::Tensor>& gradients) const;
  /// ", network groups of 1 + 1 ranks (this rank: group 0)", or "" without groups.
  std::string describe() const;

 private:
  const DistributedSession* job_;
  NetworkGroups groups_;
  std::unique_ptr<DistributedSession> group_;
  double step_weight_ = 0;
};

}  // namespace wanfw
