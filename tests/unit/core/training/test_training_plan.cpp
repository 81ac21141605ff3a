// The training plan: steps per epoch, the short last step of an epoch, and the total.

#include "plan/training_plan.hpp"
#include "wanfw/strategy.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

/// A layout: `world` processes of `accumulation` micro-batches (the plan reads nothing else).
class Layout final : public Strategy {
 public:
  Layout(int world, int accumulation) : world_(world), accumulation_(accumulation) {}
  std::string describe() const override { return "layout"; }
  void setup(Model&) override {}
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  int world_size() const override { return world_; }
  int accumulation_steps() const override { return accumulation_; }

 private:
  int world_, accumulation_;
};

CoreSettings settings(std::int64_t max_steps, std::int64_t epochs, std::int64_t batch = 4) {
  CoreSettings s;
  s.trainer.max_steps = max_steps;
  s.trainer.epochs = epochs;
  s.data.batch_size = batch;
  s.optimizer.lr = 1.0;
  s.optimizer.lr_scaling = "none";
  s.scheduler.decay = "constant";
  return s;
}

}  // namespace

TEST_CASE("epochs are whole optimizer steps") {
  const TrainingPlan plan(settings(0, 2), Layout(1, 3), /*batches_per_epoch=*/12);
  CHECK(plan.steps_per_epoch() == 4);
  CHECK(plan.total_steps() == 8);  // 2 whole epochs of 4 steps of 3 micro-batches
  CHECK_THROWS_AS(TrainingPlan(settings(0, 2), Layout(1, 3), 10), Error);
}

TEST_CASE("max_steps overrides epochs, and the global batch counts every process and micro-batch") {
  const TrainingPlan plan(settings(5, 7), Layout(2, 2), 12);
  CHECK(plan.total_steps() == 5);
  CHECK(plan.global_batch() == 2 * 2 * 4);
  CHECK(plan.steps_per_epoch() == 6);
}

TEST_CASE("each training phase warms up and decays over its own updates") {
  CoreSettings s = settings(12, 0);
  s.scheduler.warmup_steps = 2;
  std::vector<ParameterGroup> groups(2);
  groups[0].name = "generator";
  groups[1].name = "critic";
  const TrainingPlan plan(s, Layout(1, 1), 12,
                          PhaseSchedule({{"generator", {"generator"}, 1}, {"critic", {"critic"}, 2}}, groups));
  // Steps 0, 3, 6, 9 are the generator's: its warm-up spans steps 0 and 3.
  CHECK(plan.learning_rate(0) == doctest::Approx(0.5));
  CHECK(plan.learning_rate(3) == doctest::Approx(1.0));
  CHECK(plan.learning_rate(1) == doctest::Approx(0.5));  // the critic's first update
  CHECK(plan.learning_rate(2) == doctest::Approx(1.0));
  CHECK(plan.learning_rate(4) == doctest::Approx(1.0));
}
