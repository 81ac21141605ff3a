#include "sampling/network_dealing.hpp"

#include <algorithm>
#include <stdexcept>

namespace wanfw {

DealtMicroBatch deal_to_network(const std::vector<std::int64_t>& all, const std::vector<int>& routes,
                                const NetworkGroups& groups, bool last) {
  if (routes.size() != all.size())
    throw std::logic_error("deal_to_network: a route for every sample of the micro-batch is needed");
  DealtMicroBatch out;
  std::int64_t first_of_group = -1;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (routes[i] != groups.group) continue;
    if (first_of_group < 0) first_of_group = static_cast<std::int64_t>(i);
    if (out.group_samples++ % groups.group_size() == groups.rank_in_group) {
      out.samples.push_back(all[i]);
      out.places.push_back(static_cast<std::int64_t>(i));
    }
  }
  if (out.samples.empty() && (out.group_samples > 0 || last) && !all.empty()) {
    const std::int64_t place = std::max<std::int64_t>(first_of_group, 0);
    out.samples.push_back(all[static_cast<std::size_t>(place)]);
    out.places.push_back(place);
    out.stand_in = true;
  }
  return out;
}

double network_batch_weight(std::int64_t held, std::int64_t all, int data_world_size) {
  return static_cast<double>(held) * data_world_size / static_cast<double>(all);
}

}  // namespace wanfw
