#include "plan/lr_schedule.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using wanfw::LearningRateSchedule;

TEST_CASE("warm-up rises linearly to the peak") {
  const LearningRateSchedule s(1.0, 4, 100, true, 0.0);
  CHECK(s.at(0) == doctest::Approx(0.25));
  CHECK(s.at(3) == doctest::Approx(1.0));
}

TEST_CASE("cosine decay ends at min_lr_ratio times the peak") {
  const LearningRateSchedule s(2.0, 0, 100, true, 0.1);
  CHECK(s.at(0) == doctest::Approx(2.0));
  CHECK(s.at(50) == doctest::Approx(2.0 * (0.1 + 0.9 * 0.5)));
  CHECK(s.at(100) == doctest::Approx(0.2));
}

TEST_CASE("constant decay holds the peak after warm-up") {
  const LearningRateSchedule s(0.5, 2, 100, false, 0.0);
  CHECK(s.at(1) == doctest::Approx(0.5));
  CHECK(s.at(99) == doctest::Approx(0.5));
}
