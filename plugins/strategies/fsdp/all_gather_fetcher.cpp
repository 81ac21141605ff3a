#include "all_gather_fetcher.hpp"

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wanfw_fsdp {

UnitShards& AllGatherFetcher::shards(std::size_t unit) const {
  if (unit == units_.size()) return rest_;
  if (unit > units_.size())
    throw wanfw::Error(fmt::format("fsdp: the model ran unit {}, but declared {} units", unit, units_.size()),
                       "the model plugin's units() must list every unit it runs");
  return units_[unit];
}

bool AllGatherFetcher::prefetch(std::size_t unit, const std::vector<wanfw::UnitUse>&) {
  if (!settings_.prefetch) return false;
  for (std::size_t u = 0; u < units_.size(); ++u)
    if (state(u) == wanfw::UnitState::Fetching) return false;  // one gather ahead at a time
  shards(unit).start_gather(settings_.compute);
  return true;
}

void AllGatherFetcher::acquire(std::size_t unit, const std::vector<wanfw::UnitUse>&) {
  shards(unit).gather(settings_.compute);
}

void AllGatherFetcher::release(std::size_t unit) {
  shards(unit).release();
  evicted(unit);
}

void AllGatherFetcher::after_backward(std::size_t unit) {
  shards(unit).reduce_gradients(settings_.reduce, gradients_to_host_);
}

}  // namespace wanfw_fsdp
