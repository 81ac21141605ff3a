#include <ATen/ATen.h>

#include "wanfw/parallel/distributed.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parallel/fully_sharded.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

std::unique_ptr<DistributedSession> alone() {
  return DistributedSession::join({.backend = "gloo", .device = "cpu"}, LaunchEnvironment{});
}

}  // namespace

TEST_CASE("on one rank the sharded collectives copy their input, and Mean divides by one") {
  const auto session = alone();
  const at::Tensor input = at::arange(6, at::kFloat);
  at::Tensor output = at::empty({6}, at::kFloat);
  session->all_gather(output, input);
  CHECK(at::equal(output, input));
  output.zero_();
  session->reduce_scatter(output, input, Reduce::Mean);
  CHECK(at::equal(output, input));
  const at::Tensor grid = at::arange(12, at::kDouble).view({4, 3});
  at::Tensor exchanged = at::empty_like(grid);
  session->all_to_all(exchanged, grid);
  CHECK(at::equal(exchanged, grid));
}

TEST_CASE("a sharded collective refuses tensors of the wrong size on the calling rank, naming them") {
  const auto session = alone();
  CHECK_THROWS_WITH_AS(session->all_gather(at::empty({5}), at::empty({6})),
                       doctest::Contains("an all-gather: the output holds 5 Float values; 1 ranks x 6 input values"),
                       Error);
  CHECK_THROWS_WITH_AS(session->reduce_scatter(at::empty({4}), at::empty({4}, at::kDouble)),
                       doctest::Contains("a reduce-scatter: the input holds 4 Double values"), Error);
  CHECK_THROWS_WITH_AS(session->all_to_all(at::empty({4, 2}), at::empty({4, 3})),
                       doctest::Contains("an all-to-all: the output is [4, 2] of Float, the input [4, 3] of Float"),
                       Error);
  CHECK_THROWS_WITH_AS(session->all_gather(at::empty({6}), at::empty({3, 2}).t()),
                       doctest::Contains("the input must be contiguous"), Error);
}

TEST_CASE("a session splits only into groups whose size divides the job, and a group names itself") {
  const auto session = alone();
  CHECK_THROWS_WITH_AS(session->split(2), doctest::Contains("a job of 1 ranks does not split into groups of 2"), Error);
  CHECK_THROWS_WITH_AS(session->split(0), doctest::Contains("does not split into groups of 0"), Error);
  const SessionGroups groups = session->split(1);
  CHECK(groups.within->world_size() == 1);
  CHECK(groups.across->rank() == 0);
  CHECK_MESSAGE(groups.within->describe().find("in within group 0") != std::string::npos, groups.within->describe());
  const at::Tensor value = at::full({2}, 3.0);
  groups.within->all_reduce({value});
  CHECK(at::equal(value, at::full({2}, 3.0)));
}

TEST_CASE("the sharded gradient norm of one rank is the norm of its gradients, undefined ones counting as zero") {
  const auto session = alone();
  const at::Tensor a = at::tensor({3.0f, 0.0f}), b = at::tensor({4.0f});
  CHECK(sharded_gradient_norm({a, at::Tensor(), b}, *session) == 5.0);
  CHECK(sharded_gradient_norm({}, *session) == 0.0);
}
