#include "plan/phase_schedule.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wanfw {

namespace {

const char* kFix = "the model plugin's phases() must name each of its parameter groups in exactly one phase";

}  // namespace

PhaseSchedule::PhaseSchedule(std::vector<TrainingPhase> phases, const std::vector<ParameterGroup>& groups)
    : phases_(std::move(phases)), declared_(!phases_.empty()) {
  if (phases_.empty()) {
    TrainingPhase all{"train", {}, 1};
    for (const auto& group : groups) all.groups.push_back(group.name);
    phases_.push_back(std::move(all));
  }
  std::map<std::string, std::string> owner;  // group -> its phase
  std::set<std::string> names;
  for (const auto& phase : phases_) {
    if (phase.name.empty() || !names.insert(phase.name).second)
      throw Error(fmt::format("the model declares two training phases named '{}'", phase.name),
                  "the model plugin's phases() must give each phase its own, non-empty name");
    if (phase.steps < 1)
      throw Error(fmt::format("training phase '{}' has {} steps per cycle", phase.name, phase.steps),
                  "a phase needs at least one optimizer step per cycle (check the model's options)");
    for (const auto& group : phase.groups)
      if (const auto [it, fresh] = owner.emplace(group, phase.name); !fresh)
        throw Error(fmt::format("parameter group '{}' is in two training phases, '{}' and '{}'", group, it->second,
                                phase.name),
                    kFix);
  }
  std::set<std::string> known;
  for (const auto& group : groups) {
    known.insert(group.name);
    if (!group.parameters.empty() && !owner.count(group.name))
      throw Error(fmt::format("parameter group '{}' is in no training phase, so it would never train", group.name),
                  kFix);
  }
  for (const auto& [group, phase] : owner)
    if (!known.count(group))
      throw Error(fmt::format("training phase '{}' names parameter group '{}', which the model does not have", phase,
                              group),
                  kFix);
  cycle_ = 0;
  for (const auto& phase : phases_) {
    offsets_.push_back(cycle_);
    cycle_ += phase.steps;
  }
}

int PhaseSchedule::phase_at(std::int64_t step) const {
  const std::int64_t within = step % cycle_;
  int phase = 0;
  while (phase + 1 < count() && within >= offsets_[static_cast<std::size_t>(phase + 1)]) ++phase;
  return phase;
}

std::int64_t PhaseSchedule::updates_before(int phase, std::int64_t step) const {
  const std::int64_t steps = this->phase(phase).steps;
  const std::int64_t within = step % cycle_ - offsets_.at(static_cast<std::size_t>(phase));
  return step / cycle_ * steps + std::clamp<std::int64_t>(within, 0, steps);
}

std::string PhaseSchedule::describe(std::int64_t total_steps) const {
  std::string cycle, updates;
  for (int p = 0; p < count(); ++p) {
    const TrainingPhase& phase = this->phase(p);
    cycle += fmt::format("{}{} {} step{}", p ? ", then " : "", phase.name, phase.steps, phase.steps == 1 ? "" : "s");
    updates += fmt::format("{}{} {}", p ? ", " : "", phase.name, updates_before(p, total_steps));
  }
  return fmt::format("{} (a cycle of {} steps); updates in {} steps: {}", cycle, cycle_, total_steps, updates);
}

}  // namespace wanfw
