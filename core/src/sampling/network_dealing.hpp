#pragma once
// Internal: one rank's part of a micro-batch when the ranks form one group per network
// (wanfw/parallel/network_groups.hpp). A pure function of the micro-batch, its samples' routes and the
// groups, so every rank deals alike without a word exchanged.

#include <cstdint>
#include <vector>

#include "wanfw/parallel/network_groups.hpp"

namespace wanfw {

struct DealtMicroBatch {
  /// This rank's samples: its group's samples of the micro-batch, round robin over the group's
  /// ranks in step order; or one stand-in (below); or none.
  std::vector<std::int64_t> samples;
  /// Each one's index in the micro-batch (`all`).
  std::vector<std::int64_t> places;
  /// The one sample is a stand-in at weight 0: the rank has none of its own, and its group runs
  /// this micro-batch (it has samples in it, or it is the step's last).
  bool stand_in = false;
  /// The rank runs this micro-batch (false: no sample of its group is in it, and it is not the last).
  bool runs() const { return !samples.empty(); }
  /// Samples the micro-batch's group holds, all its ranks together.
  std::int64_t group_samples = 0;
};

/// `all`: micro-batch samples of every data rank in step order (one device's micro-batch);
/// `routes`: each one's network; `last`: the step's last micro-batch.
DealtMicroBatch deal_to_network(const std::vector<std::int64_t>& all, const std::vector<int>& routes,
                                const NetworkGroups& groups, bool last);

/// The weight of `held` real samples in a micro-batch of `all` samples over `data_world_size`
/// data ranks: held / (all / data_world_size), 1 for an even share (Batch::weight).
double network_batch_weight(std::int64_t held, std::int64_t all, int data_world_size);

}  // namespace wanfw
