// Strategy `fsdp`: fully sharded data parallel (ZeRO-3) on c10d — Gloo on CPUs, NCCL on GPUs;
// started by torchrun or srun like ddp. fsdp_strategy.hpp says how it works.

#include "wanfw/plugin.hpp"
#include "fsdp_strategy.hpp"
#include "wanfw/parallel/process_group_options.hpp"

namespace {

using wanfw::option;
using T = wanfw::OptionType;

/// param_dtype: a dtype, or auto: what the run computes in under autocast; in fp32, each
/// parameter's own dtype.
std::optional<at::ScalarType> compute_dtype(const wanfw::Options& o, at::ScalarType run_dtype) {
  if (o.string("param_dtype") != "auto") return o.dtype("param_dtype");
  return run_dtype == at::kFloat ? std::nullopt : std::optional<at::ScalarType>(run_dtype);
}

std::unique_ptr<wanfw::Strategy> make_strategy(const wanfw::Options& o, const wanfw::PluginContext& ctx) {
  wanfw_fsdp::FsdpSettings s;
  s.runner.compute = compute_dtype(o, ctx.dtype);
  s.runner.reduce = o.dtype("reduce_dtype");
  s.runner.prefetch = o.boolean("prefetch");
  const wanfw::StrategyLayout layout = wanfw::rank_layout_of(o);
  s.sequence_parallel = layout.sequence_parallel;
  s.network_groups = layout.network_groups;
  s.host_state = ctx.host_optimizer_state;
  s.replicate = static_cast<int>(o.integer("replicate"));
  return std::make_unique<wanfw_fsdp::FsdpStrategy>(
      s, wanfw::DistributedSession::join(wanfw::process_group_options(o, ctx)));
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_strategy(
      "fsdp", "0.1.0",
      "Fully sharded data parallel (ZeRO-3): parameters, gradients and AdamW state split across the ranks, each "
      "unit's parameters gathered just before use; one process per device (torchrun or srun).");
  d.options = wanfw::process_group_schema();
  d.options.insert(
      d.options.end(),
      {option("param_dtype", T::Choice)
           .value("auto")
           .choices({"auto", "float32", "bfloat16", "float16"})
           .doc(
               "dtype parameters are gathered and computed in: auto follows precision (bf16 autocast gathers bfloat16; "
               "fp32 gathers each parameter in its own dtype). Master weights stay in the parameters' dtype."),
       option("reduce_dtype", T::Choice)
           .value("float32")
           .choices({"float32", "bfloat16"})
           .doc("dtype gradients are reduce-scattered in (the mean over ranks)."),
       option("prefetch", T::Boolean)
           .value("true")
           .doc("Start gathering the next unit's parameters while the current one computes (forward and backward)."),
       option("replicate", T::Integer)
           .value("1")
           .doc("Hybrid sharding: the ranks (of each network's group) in this many groups of contiguous ranks, each "
                "sharding the whole state over its ranks, the groups' gradients averaged once a step. Past one "
                "node, one group a node: gathers stay on the node's links, one all-reduce of a shard a rank crosses "
                "nodes. 1: every rank shards the state."),
       wanfw::network_groups_option("each network sharded over its own group")});
  d.capabilities.shards_state = true;
  d.capabilities.places_networks = true;
  d.capabilities.host_state = true;
  d.make_strategy = make_strategy;
  d.strategy_layout = [](const wanfw::Options& o) {
    wanfw::StrategyLayout layout = wanfw::rank_layout_of(o);
    if (o.integer("replicate") < 1) o.fail("replicate", "must be 1 (one group) or more");
    layout.replica_groups = static_cast<int>(o.integer("replicate"));
    return layout;
  };
  return d;
}

}  // namespace

WANFW_PLUGIN(Strategy, describe)
