// The unit runtime's own record of the life cycle (wanfw/parallel/unit_runtime.hpp), with a fetcher that
// frees what it releases, as fsdp does, and fetches the parameters in no unit (the root): the tiny
// Wan DiT's two blocks are units 0 and 1, the root is unit 2.

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "tiny_dit.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parallel/unit_runtime.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace wanfw {
// A failed comparison of states prints their names.
std::ostream& operator<<(std::ostream& out, UnitState state) {
  constexpr const char* kNames[] = {"Released", "Fetching", "Ready", "InUse"};
  return out << kNames[static_cast<int>(state)];
}
}  // namespace wanfw

namespace {

using wanfw::UnitState;

/// Records every call; frees (evicts) what it releases; every prefetch starts.
class FreeingFetcher final : public wanfw::UnitFetcher {
 public:
  std::vector<std::string> calls;
  bool prefetch(std::size_t unit, const std::vector<wanfw::UnitUse>&) override { return note("prefetch", unit), true; }
  void acquire(std::size_t unit, const std::vector<wanfw::UnitUse>&) override { note("acquire", unit); }
  void release(std::size_t unit) override {
    note("release", unit);
    evicted(unit);
  }
  void after_backward(std::size_t unit) override { note("after_backward", unit); }
  bool fetches_root() const override { return true; }
  bool stale_after_step() const override { return true; }
  /// The calls since the last take.
  std::vector<std::string> take() { return std::exchange(calls, {}); }

 private:
  void note(const char* what, std::size_t unit) { calls.push_back(std::string(what) + " " + std::to_string(unit)); }
};

std::vector<UnitState> states(const wanfw::UnitRuntime& runtime) {
  std::vector<UnitState> out;
  for (std::size_t u = 0; u <= runtime.units().size(); ++u) out.push_back(runtime.state(u));
  return out;
}

/// The tiny DiT running its blocks through a runtime with a FreeingFetcher.
struct Rig {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  wanfw::testing::TinyInputs in = wanfw::testing::tiny_inputs(dit->config());
  std::shared_ptr<FreeingFetcher> fetcher = std::make_shared<FreeingFetcher>();
  wanfw::UnitRuntime runtime{dit->units(""), fetcher};
  Rig() { dit->set_unit_runner(&runtime, 0); }
};

}  // namespace

TEST_CASE("the unit runtime holds the root for a micro-step and lets a stale fetcher's prefetches go at its end") {
  Rig rig;
  auto& [dit, in, fetcher, runtime] = rig;
  REQUIRE(runtime.units().size() == 2);
  CHECK(fetcher->runtime() == &runtime);

  runtime.begin_step();
  CHECK(fetcher->take() == std::vector<std::string>{"acquire 2"});
  CHECK(runtime.state(2) == UnitState::InUse);
  dit->forward(in.x, in.t, in.context).pow(2).mean().backward();
  // Each block fetched and freed around its forward and its backward; after block 0's backward the
  // next pass's blocks are prefetched by the recorded order, and are still fetching.
  CHECK(states(runtime) == std::vector{UnitState::Fetching, UnitState::Fetching, UnitState::InUse});
  fetcher->take();
  runtime.end_step();
  CHECK(fetcher->take() == std::vector<std::string>{"after_backward 2", "release 2", "release 0", "release 1"});
  CHECK(states(runtime) == std::vector(3, UnitState::Released));
}

TEST_CASE("the unit runtime holds every unit and the root from hold_all to end_hold, fetching none in between") {
  Rig rig;
  auto& [dit, in, fetcher, runtime] = rig;
  runtime.hold_all();
  CHECK(fetcher->take() == std::vector<std::string>{"acquire 0", "acquire 1", "acquire 2"});
  {
    torch::NoGradGuard no_grad;
    dit->forward(in.x, in.t, in.context);
  }
  CHECK(fetcher->take().empty());
  CHECK(states(runtime) == std::vector(3, UnitState::Ready));
  runtime.end_hold();
  CHECK(fetcher->take() == std::vector<std::string>{"release 0", "release 1", "release 2"});
  CHECK(states(runtime) == std::vector(3, UnitState::Released));
}

TEST_CASE("a unit fetcher serves one runtime") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const auto fetcher = std::make_shared<FreeingFetcher>();
  {
    wanfw::UnitRuntime first(dit->units(""), fetcher);
    CHECK_THROWS_WITH_AS(wanfw::UnitRuntime(dit->units(""), fetcher),
                         doctest::Contains("a unit fetcher was given to a second unit runtime"), wanfw::Error);
  }
  CHECK(fetcher->runtime() == nullptr);  // the first one is gone: the fetcher may serve another
}
