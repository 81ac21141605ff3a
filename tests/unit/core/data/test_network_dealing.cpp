#include <set>

#include "sampling/network_dealing.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parallel/network_groups.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

const std::vector<std::int64_t> kSamples{10, 11, 12, 13, 14, 15};
const std::vector<int> kRoutes{0, 1, 0, 0, 1, 0};  // four samples of network 0, two of network 1

}  // namespace

TEST_CASE("network groups: contiguous ranks, one group a network, sizes that must add up to the world") {
  const NetworkGroups g = NetworkGroups::of_rank({3, 2}, 4, 5);
  CHECK(g.group == 1);
  CHECK(g.rank_in_group == 1);
  CHECK(g.group_size() == 2);
  CHECK(g.first_rank(1) == 3);
  CHECK(NetworkGroups::of_rank({3, 2}, 2, 5).group == 0);
  CHECK_THROWS_AS(NetworkGroups::of_rank({1, 1}, 0, 3), Error);
  CHECK_THROWS_AS(NetworkGroups::of_rank({2, 0}, 0, 2), Error);
}

TEST_CASE("a micro-batch's samples go round robin over the ranks of their network's group, each once") {
  std::multiset<std::int64_t> dealt;
  for (int rank = 0; rank < 5; ++rank) {
    const DealtMicroBatch d = deal_to_network(kSamples, kRoutes, NetworkGroups::of_rank({3, 2}, rank, 5), false);
    CHECK_FALSE(d.stand_in);
    CHECK(d.group_samples == (rank < 3 ? 4 : 2));
    dealt.insert(d.samples.begin(), d.samples.end());
  }
  CHECK(dealt == std::multiset<std::int64_t>(kSamples.begin(), kSamples.end()));
  // Network 0's samples 10, 12, 13, 15 in step order over its three ranks: 2 + 1 + 1.
  CHECK(deal_to_network(kSamples, kRoutes, NetworkGroups::of_rank({3, 2}, 0, 5), false).samples ==
        std::vector<std::int64_t>{10, 15});
  CHECK(deal_to_network(kSamples, kRoutes, NetworkGroups::of_rank({3, 2}, 2, 5), false).samples ==
        std::vector<std::int64_t>{13});
}

TEST_CASE("a rank without samples runs a stand-in when its group runs the micro-batch, and nothing otherwise") {
  // Network 1 has two samples over three ranks: its third rank stands in with the group's first.
  const DealtMicroBatch idle = deal_to_network(kSamples, kRoutes, NetworkGroups::of_rank({2, 3}, 4, 5), false);
  CHECK(idle.stand_in);
  CHECK(idle.samples == std::vector<std::int64_t>{11});
  // No sample of network 1 at all: skipped, except in the step's last micro-batch.
  const std::vector<int> all_zero(kSamples.size(), 0);
  CHECK_FALSE(deal_to_network(kSamples, all_zero, NetworkGroups::of_rank({1, 1}, 1, 2), false).runs());
  const DealtMicroBatch last = deal_to_network(kSamples, all_zero, NetworkGroups::of_rank({1, 1}, 1, 2), true);
  CHECK(last.stand_in);
  CHECK(last.group_samples == 0);
}

TEST_CASE("a rank's weight is its samples over an even share of the micro-batch") {
  CHECK(network_batch_weight(2, 4, 2) == 1.0);
  CHECK(network_batch_weight(3, 4, 2) == 1.5);
  CHECK(network_batch_weight(1, 6, 4) == doctest::Approx(4.0 / 6.0));
}
