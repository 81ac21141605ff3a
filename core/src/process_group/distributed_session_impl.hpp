#pragma once
// Internal: what a DistributedSession holds (distributed_session.cpp sets it up,
// distributed_session_collectives.cpp, _sharded.cpp and _groups.cpp use it).

#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "process_group/rank_heartbeat.hpp"
#include "wanfw/parallel/distributed.hpp"

namespace wanfw {

struct DistributedSession::Impl {
  ProcessGroupOptions options;
  LaunchEnvironment env;
  c10::Device device{c10::kCPU};
  std::string backend;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::unique_ptr<Heartbeat> heartbeat;
  /// A group's session (split): the job's, which names lost ranks and outlives it.
  const Impl* parent = nullptr;
  /// A name for messages: "" for the job, "within group 1" for a group.
  std::string group;

  /// The device `options.device` asks for: this rank's GPU (by local rank) or the CPU.
  c10::Device choose_device() const;
  /// The process group over `store` for `env`'s rank and size, on `backend`.
  void build_backend();
  /// The rendezvous store: a hash store alone, else TCP (hosted by rank 0 or torchrun's agent).
  c10::intrusive_ptr<c10d::Store> make_store() const;
  /// " Rank(s) 1 stopped responding." when their heartbeat has stalled; "" when all beat.
  std::string lost_ranks() const;
};

/// The first line of a c10d error (the rest is a C++ stack).
inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace wanfw
