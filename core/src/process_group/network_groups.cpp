#include "wanfw/parallel/network_groups.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"

namespace wanfw {

NetworkGroups NetworkGroups::of_rank(std::vector<int> sizes, int rank, int world_size) {
  NetworkGroups out;
  out.sizes = std::move(sizes);
  int total = 0;
  for (const int size : out.sizes) {
    if (size < 1)
      throw Error(fmt::format("network groups of [{}] ranks: every group needs at least one rank", fmt::join(out.sizes, ", ")),
                  "give each network's group a positive number of ranks");
    total += size;
  }
  if (total != world_size)
    throw Error(fmt::format("network groups of [{}] ranks add up to {}, but the job has {} ranks",
                            fmt::join(out.sizes, ", "), total, world_size),
                fmt::format("launch {} ranks (torchrun --nproc-per-node {}), or give groups that add up to {}", total,
                            total, world_size));
  while (rank >= out.first_rank(out.group + 1)) ++out.group;
  out.rank_in_group = rank - out.first_rank(out.group);
  return out;
}

}  // namespace wanfw
