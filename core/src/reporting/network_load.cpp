#include "reporting/network_load.hpp"

#include <algorithm>

#include "wanfw/strategy.hpp"

namespace wanfw {

NetworkLoad::NetworkLoad(NetworkGroups groups, std::vector<PlaceableNetwork> networks)
    : groups_(std::move(groups)), networks_(std::move(networks)) {}

std::map<std::string, double> NetworkLoad::step(Strategy& strategy, std::int64_t samples, double busy_seconds,
                                                std::int64_t& job_samples) const {
  const auto count = static_cast<std::size_t>(groups_.count());
  // Each rank fills its group's slots: [samples of each group..., busy seconds of each group...].
  std::vector<double> sums(2 * count, 0.0);
  const auto mine = static_cast<std::size_t>(groups_.group);
  sums[mine] = static_cast<double>(samples);
  sums[count + mine] = busy_seconds;
  sums = strategy.all_reduce(std::move(sums), Reduce::Sum);
  const double slowest = strategy.all_reduce({busy_seconds}, Reduce::Max).at(0);
  std::map<std::string, double> out;
  job_samples = 0;
  for (std::size_t g = 0; g < count; ++g) {
    job_samples += static_cast<std::int64_t>(sums[g]);
    const std::string& name = networks_.at(g).name;
    out["samples/" + name] = sums[g];
    out["idle_s/" + name] = std::max(0.0, slowest - sums[count + g] / groups_.sizes[g]);
  }
  return out;
}

}  // namespace wanfw
