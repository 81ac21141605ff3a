#pragma once
// The options every strategy on the job's process group takes (ddp, fsdp, ...): the backend, the
// device, the collectives' timeout and the rendezvous port.
//
//   d.options = wanfw::process_group_schema();
//   d.options.push_back(wanfw::option("bucket_mb", ...));
//   auto session = wanfw::DistributedSession::join(wanfw::process_group_options(o, ctx));

#include "wanfw/parallel/distributed.hpp"
#include "wanfw/options.hpp"
#include "wanfw/plugin.hpp"

namespace wanfw {

/// backend (auto | gloo | nccl), device (auto | cpu | cuda), timeout_s, master_port.
OptionSchema process_group_schema();
/// Those options from a strategy's section; a timeout that is not positive fails at its value.
ProcessGroupOptions process_group_options(const Options& options, const PluginContext& context);

/// `network_groups`, for a strategy that places networks on rank groups
/// (StrategyCapabilities::places_networks); `each` says what a group does with its network.
OptionSpec network_groups_option(const std::string& each);

/// The ranks' layout `sequence_parallel` and, where the schema has it, `network_groups` describe,
/// checked when the config is read (Options::fail at the value): a group of 1 to 2^20 ranks, and
/// network groups only without sequence parallelism, which they do not combine with yet. Their sum
/// is checked against the job's ranks when the strategy joins them (NetworkGroups::of_rank). What
/// a strategy on the process group gives as PluginDescriptor::strategy_layout.
StrategyLayout rank_layout_of(const Options& options);

}  // namespace wanfw
