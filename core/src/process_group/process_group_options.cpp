#include "wanfw/process_group_options.hpp"

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

ProcessGroupOptions process_group_options(const Options& o, const PluginContext& context) {
  const double timeout = o.number("timeout_s");
  if (!(timeout > 0)) o.fail("timeout_s", "must be positive");
  ProcessGroupOptions group;
  group.backend = o.string("backend");
  group.device = o.string("device");
  group.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
  group.default_port = static_cast<int>(o.integer("master_port"));
  group.section = context.section;
  group.config = &o;
  return group;
}

}  // namespace wanfw
