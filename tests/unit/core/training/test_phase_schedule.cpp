// The training phases' cycle: which phase each optimizer step trains, how many updates each phase
// had before a step, and the phase declarations a model may not make.

#include "plan/phase_schedule.hpp"
#include "wanfw/error.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

std::vector<ParameterGroup> groups(std::initializer_list<const char*> names) {
  std::vector<ParameterGroup> out;
  for (const char* name : names) {
    ParameterGroup g;
    g.name = name;
    g.parameters = {{std::string(name) + ".w", at::zeros({1})}};
    out.push_back(std::move(g));
  }
  return out;
}

/// Generator for one step, then the critic for five: the DMD2 cycle.
PhaseSchedule dmd() {
  return PhaseSchedule({{"generator", {"generator"}, 1}, {"critic", {"critic"}, 5}}, groups({"generator", "critic"}));
}

}  // namespace

TEST_CASE("the phases take turns in a fixed cycle, each for its own number of steps") {
  const PhaseSchedule s = dmd();
  std::vector<int> phases;
  for (std::int64_t step = 0; step < 13; ++step) phases.push_back(s.phase_at(step));
  CHECK(phases == std::vector<int>{0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0});
}

TEST_CASE("a phase's updates before a step count its own steps only, mid-cycle too") {
  const PhaseSchedule s = dmd();
  for (std::int64_t step = 0; step <= 20; ++step) {
    std::int64_t generator = 0, critic = 0;  // counted one step at a time
    for (std::int64_t k = 0; k < step; ++k) (s.phase_at(k) == 0 ? generator : critic) += 1;
    CHECK(s.updates_before(0, step) == generator);
    CHECK(s.updates_before(1, step) == critic);
  }
}

TEST_CASE("a model without phases trains every group at every step as one phase") {
  const PhaseSchedule s({}, groups({"lora", "norms"}));
  CHECK_FALSE(s.declared());
  CHECK(s.count() == 1);
  CHECK(s.phase(0).groups == std::vector<std::string>{"lora", "norms"});
  CHECK(s.phase_at(7) == 0);
  CHECK(s.updates_before(0, 7) == 7);
}

TEST_CASE("a phase plan that leaves a group untrained, or trains one twice, or names a missing one, is refused") {
  const auto both = groups({"generator", "critic"});
  CHECK_THROWS_WITH_AS(PhaseSchedule({{"generator", {"generator"}, 1}}, both),
                       doctest::Contains("parameter group 'critic' is in no training phase"), Error);
  CHECK_THROWS_WITH_AS(PhaseSchedule({{"a", {"generator", "critic"}, 1}, {"b", {"critic"}, 1}}, both),
                       doctest::Contains("'critic' is in two training phases, 'a' and 'b'"), Error);
  CHECK_THROWS_WITH_AS(PhaseSchedule({{"a", {"generator", "critic", "ema"}, 1}}, both),
                       doctest::Contains("names parameter group 'ema', which the model does not have"), Error);
  CHECK_THROWS_WITH_AS(PhaseSchedule({{"a", {"generator"}, 0}, {"b", {"critic"}, 1}}, both),
                       doctest::Contains("training phase 'a' has 0 steps per cycle"), Error);
  CHECK_THROWS_WITH_AS(PhaseSchedule({{"a", {"generator"}, 1}, {"a", {"critic"}, 1}}, both),
                       doctest::Contains("two training phases named 'a'"), Error);
}

TEST_CASE("the plan's description names the cycle and each phase's updates") {
  CHECK(dmd().describe(60) ==
        "generator 1 step, then critic 5 steps (a cycle of 6 steps); updates in 60 steps: generator 10, critic 50");
}
