#pragma once
// Internal: under networks on rank groups (wanfw/parallel/network_groups.hpp), how a step's work fell on
// the groups: each group's samples, and the time its ranks waited for the slowest rank of the job.
// Logged every step as samples/<network> and idle_s/<network>, the same on every rank.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "wanfw/parallel/network_groups.hpp"

namespace wanfw {

class Strategy;

class NetworkLoad {
 public:
  NetworkLoad(NetworkGroups groups, std::vector<PlaceableNetwork> networks);
  /// A collective: every rank calls it once a step, with the samples of its own it trained (no
  /// stand-ins) and the seconds it spent on the step's micro-batches and gradient reduction.
  /// samples/<network>: the group's samples; idle_s/<network>: the slowest rank's seconds less the
  /// group's mean, the time its ranks waited at the step's first collective of the whole job.
  /// `job_samples`: the step's samples, every group's.
  std::map<std::string, double> step(Strategy& strategy, std::int64_t samples, double busy_seconds,
                                     std::int64_t& job_samples) const;

 private:
  NetworkGroups groups_;
  std::vector<PlaceableNetwork> networks_;
};

}  // namespace wanfw
