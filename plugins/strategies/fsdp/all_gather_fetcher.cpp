#include "all_gather_fetcher.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wanfw_fsdp {

wanfw::UnitState AllGatherFetcher::state(std::size_t unit) const {
  const auto& flats = units_.at(unit).flats;
  const auto in = [&](FlatShard::State s) {
    return std::any_of(flats.begin(), flats.end(), [&](const auto& flat) { return flat->state() == s; });
  };
  if (in(FlatShard::State::Gathering)) return wanfw::UnitState::Fetching;
  return in(FlatShard::State::Released) ? wanfw::UnitState::Released : wanfw::UnitState::Ready;
}

bool AllGatherFetcher::prefetch(std::size_t unit, const std::vector<wanfw::UnitUse>&) {
  if (!settings_.prefetch) return false;
  for (std::size_t u = 0; u < units_.size(); ++u)
    if (state(u) == wanfw::UnitState::Fetching) return false;  // one gather ahead at a time
  units_.at(unit).start_gather(settings_.compute);
  return true;
}

void AllGatherFetcher::acquire(std::size_t unit, const std::vector<wanfw::UnitUse>&) {
  if (unit >= units_.size())
    throw wanfw::Error(fmt::format("fsdp: the model ran unit {}, but declared {} units", unit, units_.size()),
                       "the model plugin's units() must list every unit it runs");
  units_[unit].gather(settings_.compute);
}

void AllGatherFetcher::release(std::size_t unit) {
  if (!held_) units_.at(unit).release();
}

void AllGatherFetcher::after_backward(std::size_t unit) { units_.at(unit).reduce_gradients(settings_.reduce); }

void AllGatherFetcher::begin_step() { rest_.gather(settings_.compute); }

void AllGatherFetcher::end_step() {
  rest_.reduce_gradients(settings_.reduce);
  release_all();
}

void AllGatherFetcher::begin_evaluation() {
  for (auto& unit : units_) unit.gather(settings_.compute);
  rest_.gather(settings_.compute);
  held_ = true;
}

void AllGatherFetcher::end_evaluation() {
  held_ = false;
  release_all();
}

void AllGatherFetcher::release_all() {
  for (auto& unit : units_) unit.release();
  rest_.release();
}

}  // namespace wanfw_fsdp
