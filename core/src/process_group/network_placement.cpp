// A strategy's network groups: the group's session, and the step's rules (loss scale, a network
// without samples skipped, the norm over every network).

#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/parallel/distributed.hpp"
#include "wanfw/parallel/network_groups.hpp"
#include "wanfw/strategy.hpp"

namespace wanfw {

NetworkPlacement::NetworkPlacement(const DistributedSession& job, std::vector<int> sizes) : job_(&job) {
  if (sizes.empty()) return;
  groups_ = NetworkGroups::of_rank(std::move(sizes), job.rank(), job.world_size());
  group_ = job.network_group(groups_);
}

NetworkPlacement::~NetworkPlacement() = default;

double NetworkPlacement::loss_scale() const {
  if (!group_) return 1.0;
  return static_cast<double>(groups_.group_size()) / static_cast<double>(groups_.world_size());
}

void NetworkPlacement::count(const MicroStep& micro) { step_weight_ += micro.weight; }

bool NetworkPlacement::settle(const std::vector<at::Tensor>& parameters) {
  if (!group_) return true;
  const double weight = group_->all_reduce(std::vector<double>{step_weight_}, Reduce::Sum).at(0);
  step_weight_ = 0;
  if (weight > 0) return true;
  for (const at::Tensor& p : parameters) p.mutable_grad().reset();
  return false;
}

double NetworkPlacement::gradient_norm(const std::vector<at::Tensor>& gradients) const {
  std::vector<at::Tensor> norms;  // one per tensor, in its dtype: one transfer for all
  for (const at::Tensor& gradient : gradients)
    if (gradient.defined()) norms.push_back(at::linalg_vector_norm(gradient.detach(), 2).to(at::kDouble));
  const double squares = norms.empty() ? 0.0 : at::stack(norms).pow(2).sum().item<double>();
  // Every rank of a group holds the same reduced gradient: each counts 1/size of its square.
  const double share = group_ ? squares / groups_.group_size() : squares;
  return std::sqrt(job_->all_reduce(std::vector<double>{share}, Reduce::Sum).at(0));
}

std::string NetworkPlacement::describe() const {
  if (!group_) return "";
  return fmt::format(", network groups of {} ranks (this rank: group {})", fmt::join(groups_.sizes, " + "),
                     groups_.group);
}

}  // namespace wanfw
