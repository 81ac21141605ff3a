// Drives the sharded-training collectives of a DistributedSession (started by torchrun) on
// rank-dependent inputs and writes each rank's inputs and outputs to OUT/rank_<R>.safetensors, for
// the Python test to check against torch's own arithmetic.
//
//   torchrun --no-python --nproc-per-node=3 wanfw_test_tools collectives OUT

#include <cstdio>
#include <filesystem>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "tools.hpp"
#include "wanfw/parallel/distributed.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

int collectives_tool(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: wanfw_test_tools collectives OUT_FOLDER\n", stderr);
    return 2;
  }
  try {
    auto session = wanfw::DistributedSession::join({.backend = "gloo", .device = "cpu"});
    const std::int64_t world = session->world_size();
    const double rank = session->rank();
    // Values that differ by rank and by position, exact in float32.
    const at::Tensor gather_in = at::arange(5, at::kFloat) + 100 * rank;
    const at::Tensor gathered = at::empty({world * 5}, at::kFloat);
    session->all_gather(gathered, gather_in);

    const at::Tensor scatter_in = (at::arange(world * 4, at::kFloat) + 1) * (rank + 1);
    const at::Tensor summed = at::empty({4}, at::kFloat), averaged = at::empty({4}, at::kFloat),
                     largest = at::empty({4}, at::kFloat);
    session->reduce_scatter(summed, scatter_in, wanfw::Reduce::Sum);
    session->reduce_scatter(averaged, scatter_in, wanfw::Reduce::Mean);
    session->reduce_scatter(largest, scatter_in * (rank == 1 ? -1 : 1), wanfw::Reduce::Max);

    const at::Tensor exchange_in = at::arange(world * 2 * 3, at::kDouble).view({world * 2, 3}) + 1000 * rank;
    const at::Tensor exchanged = at::empty_like(exchange_in);
    session->all_to_all(exchanged, exchange_in);

    // Groups of two contiguous ranks (one group when the world is odd), and the ranks across them.
    const wanfw::SessionGroups groups = session->split(world % 2 == 0 ? 2 : static_cast<int>(world));
    const at::Tensor within_sum = at::full({3}, rank, at::kFloat), across_sum = at::full({3}, rank, at::kFloat);
    groups.within->all_reduce({within_sum});
    groups.across->all_reduce({across_sum});
    const at::Tensor within_gathered = at::empty({groups.within->world_size() * 5}, at::kFloat);
    groups.within->all_gather(within_gathered, gather_in);

    wanfw::write_safetensors(std::filesystem::path(argv[1]) / fmt::format("rank_{}.safetensors", session->rank()),
                             {{"gather_in", gather_in},
                              {"gathered", gathered},
                              {"scatter_in", scatter_in},
                              {"summed", summed},
                              {"averaged", averaged},
                              {"largest", largest},
                              {"exchange_in", exchange_in},
                              {"exchanged", exchanged},
                              {"within_sum", within_sum},
                              {"across_sum", across_sum},
                              {"within_gathered", within_gathered},
                              {"group_ranks", at::tensor({static_cast<double>(groups.within->rank()),
                                                          static_cast<double>(groups.across->rank())})}},
                             {});
    session->barrier();
    return 0;
  } catch (const wanfw::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
