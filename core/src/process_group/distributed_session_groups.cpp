// DistributedSession::split and network_group: a job's ranks in groups (sequence-parallel groups
// inside, data parallel across them; or one group per network), each group a process group over
// the job's store under its own prefix.

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "process_group/distributed_session_impl.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parallel/network_groups.hpp"

namespace wanfw {

SessionGroups DistributedSession::split(int group_size) const { return split(group_size, ""); }

SessionGroups DistributedSession::split(int group_size, const std::string& purpose) const {
  const int world = impl_->env.world_size, rank = impl_->env.rank;
  if (group_size < 1 || world % group_size != 0)
    throw Error(fmt::format("a job of {} ranks does not split into groups of {}", world, group_size),
                "choose a group size that divides the number of ranks");
  SessionGroups groups;
  const std::string prefix = purpose.empty() ? "" : purpose + " ";
  groups.within = group_session(prefix + "within", rank / group_size, rank % group_size, group_size);
  groups.across = group_session(prefix + "across", rank % group_size, rank / group_size, world / group_size);
  return groups;
}

std::unique_ptr<DistributedSession> DistributedSession::network_group(const NetworkGroups& groups) const {
  if (groups.world_size() != impl_->env.world_size ||
      groups.first_rank(groups.group) + groups.rank_in_group != impl_->env.rank)
    throw std::logic_error("network_group: the groups describe another rank or world");
  return group_session("network", groups.group, groups.rank_in_group, groups.group_size());
}

std::unique_ptr<DistributedSession> DistributedSession::group_session(const std::string& kind, int group, int rank,
                                                                      int size) const {
  auto impl = std::make_unique<Impl>();
  impl->options = impl_->options;
  impl->env = impl_->env;
  impl->env.rank = rank;
  impl->env.world_size = size;
  impl->device = impl_->device;
  impl->backend = impl_->backend;
  impl->parent = impl_.get();
  impl->group = fmt::format("{} group {}", kind, group);
  // Every member names the group alike and no other group shares the name: its keys are its own.
  impl->store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("wanfw/{}/{}/", kind, group), impl_->store);
  impl->build_backend();
  std::unique_ptr<DistributedSession> session(new DistributedSession(std::move(impl)));
  session->guarded(fmt::format("joining {} {}", kind, group), [&] { session->impl_->pg->barrier()->wait(); });
  return session;
}

}  // namespace wanfw
