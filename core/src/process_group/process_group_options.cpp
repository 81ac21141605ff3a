#include "wanfw/parallel/process_group_options.hpp"

#include <fmt/format.h>

namespace wanfw {

OptionSchema process_group_schema() {
  using T = OptionType;
  return {
      option("backend", T::Choice).value("auto").choices({"auto", "gloo", "nccl"}).doc(
          "Collective backend: nccl on CUDA devices and gloo on CPUs (auto), or forced."),
      option("device", T::Choice).value("auto").choices({"auto", "cpu", "cuda"}).doc(
          "cuda:<LOCAL_RANK> when CUDA is available (auto), or forced."),
      option("timeout_s", T::Number).value("1800").doc(
          "Seconds a collective (or the rendezvous) may wait for the other ranks before the run fails."),
      option("master_port", T::Integer).value("29500").doc(
          "Rendezvous port when the launcher sets no MASTER_PORT (SLURM without it)."),
      option("sequence_parallel", T::Integer).value("1").doc(
          "Ranks that share each sample (Ulysses sequence parallelism): groups of this many contiguous ranks split "
          "every sample's tokens, and the data is split over the groups. Must divide the ranks and the model's "
          "attention heads; 1: every rank its own samples."),
  };
}

OptionSpec network_groups_option(const std::string& each) {
  return option("network_groups", OptionType::IntegerList)
      .value("[]")
      .doc("One group of ranks per network of the model, in its order (model.expert: both: [high_noise ranks, "
           "low_noise ranks]): " + each + ", each sample trained on the ranks of its network. Empty: every rank "
           "takes part in the whole model.");
}

StrategyLayout rank_layout_of(const Options& o) {
  // More ranks than a group could ever hold is a typo, not a job (and would overflow an int).
  constexpr std::int64_t kMostRanks = 1 << 20;
  const auto ranks = [&](std::int64_t count, const char* name, const char* what) {
    if (count < 1 || count > kMostRanks)
      o.fail(name, fmt::format("{} of {} ranks: it takes 1 to {}", what, count, kMostRanks));
    return static_cast<int>(count);
  };
  StrategyLayout layout;
  layout.sequence_parallel = ranks(o.integer("sequence_parallel"), "sequence_parallel", "a sequence-parallel group");
  if (!o.has("network_groups")) return layout;
  for (const std::int64_t size : o.integers("network_groups"))
    layout.network_groups.push_back(ranks(size, "network_groups", "a network's group"));
  if (!layout.network_groups.empty() && layout.sequence_parallel > 1)
    o.fail("network_groups", "network groups do not combine with sequence_parallel yet",
           "set sequence_parallel: 1, or put every network on every rank (network_groups: [])");
  return layout;
}

ProcessGroupOptions process_group_options(const Options& o, const PluginContext& context) {
  const double timeout = o.number("timeout_s");
  if (!(timeout > 0)) o.fail("timeout_s", "must be positive");
  ProcessGroupOptions group;
  group.backend = o.string("backend");
  group.device = o.string("device");
  group.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
  const std::int64_t port = o.integer("master_port");
  if (port < 1 || port > 65535) o.fail("master_port", fmt::format("{} is not a TCP port", port), "use 1 to 65535");
  group.default_port = static_cast<int>(port);
  group.section = context.section;
  group.config = &o;
  return group;
}

}  // namespace wanfw
