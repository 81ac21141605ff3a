#include <fmt/format.h>

#include "wanfw/parallel/distributed.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"
#include "wanfw/model.hpp"
#include "wanfw/parallel/sequence_parallel.hpp"

namespace wanfw {

SequenceGroups::SequenceGroups(const DistributedSession& job, int size)
    : size_(size), rank_(job.rank()), world_(job.world_size()) {
  if (size < 1) throw Error(fmt::format("a sequence-parallel group of {} ranks", size), "sequence_parallel must be >= 1");
  if (size > 1 && world_ == 1) {  // no launcher (validate, a first try): one process holds whole sequences
    log::warn("sequence_parallel ", size, " needs ", size,
              " ranks a group; this process runs alone and holds every token of its samples");
    size_ = 1;
  }
  if (size_ == 1) return;
  if (world_ % size != 0)
    throw Error(fmt::format("{} ranks do not divide into sequence-parallel groups of {}", world_, size),
                "launch a multiple of strategy.sequence_parallel ranks");
  SessionGroups groups = job.split(size);
  within_ = std::move(groups.within);
  across_ = std::move(groups.across);
}

SequenceGroups::~SequenceGroups() = default;

void SequenceGroups::attach(Model& model) const {
  if (within_ && !model.set_sequence_group(within_.get()))
    throw Error(fmt::format("the model plugin cannot split its samples' tokens over a sequence-parallel group of {}",
                            size_),
                "set strategy.sequence_parallel: 1, or use a model plugin that implements set_sequence_group");
}

void SequenceGroups::detach(Model& model) const {
  if (within_) model.set_sequence_group(nullptr);
}

std::string SequenceGroups::describe() const {
  const std::int64_t groups = world_ / size_;
  return size_ == 1 ? std::string()
                    : fmt::format(", sequence parallel {} ({} group{})", size_, groups, groups == 1 ? "" : "s");
}

}  // namespace wanfw
