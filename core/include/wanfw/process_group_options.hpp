#pragma once
// The options every strategy on the job's process group takes (ddp, fsdp, ...): the backend, the
// device, the collectives' timeout and the rendezvous port.
//
//   d.options = wanfw::process_group_schema();
//   d.options.push_back(wanfw::option("bucket_mb", ...));
//   auto session = wanfw::DistributedSession::join(wanfw::process_group_options(o, ctx));

#include "wanfw/distributed.hpp"
#include "wanfw/options.hpp"
#include "wanfw/plugin.hpp"

namespace wanfw {

/// backend (auto | gloo | nccl), device (auto | cpu | cuda), timeout_s, master_port.
OptionSchema process_group_schema();
/// Those options from a strategy's section; a timeout that is not positive fails at its value.
ProcessGroupOptions process_group_options(const Options& options, const PluginContext& context);

}  // namespace wanfw
