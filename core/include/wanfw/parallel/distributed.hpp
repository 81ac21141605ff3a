#pragma once
// Multi-process jobs, for strategies: where this process sits in the job (read from torchrun's or
// SLURM's environment) and the job's c10d process group, joined in one call.
//
//   auto session = wanfw::DistributedSession::join({.backend = "auto", .device = "auto"});
//   session->all_reduce(tensors, wanfw::Reduce::Mean);
//
// The session creates the rendezvous store (torchrun's agent store, or a TCP store hosted by
// rank 0), the Gloo (CPU) or NCCL (CUDA) backend, and a heartbeat per rank, so that when a
// collective fails the error names the ranks that stopped responding instead of hanging or
// printing a c10d stack.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include "wanfw/parallel/reduce.hpp"

namespace c10d {
class ProcessGroup;
}

namespace wanfw {

class Options;
struct NetworkGroups;

/// Where this process sits in a multi-process job.
struct LaunchEnvironment {
  std::string launcher;  ///< "torchrun", "slurm", "environment" (RANK/WORLD_SIZE set by hand), or "" when alone
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  /// torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT: every rank is a client, keys
  /// under /worker/attempt_<restart_count>.
  bool agent_store = false;
  int restart_count = 0;
};

/// Looks an environment variable up (std::getenv in production, a map in tests).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_environment();

/// The launch as the environment describes it: torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
/// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), SLURM (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
/// the node list; MASTER_ADDR/MASTER_PORT override), or a single process. `default_port` when SLURM
/// gives no MASTER_PORT. Throws wanfw::Error naming the variable when a value is missing or malformed.
LaunchEnvironment detect_launch(const EnvLookup& env, int default_port);

/// The first host of a SLURM node list: "gpu[01-04,07],cpu3" -> "gpu01".
std::string first_slurm_host(const std::string& nodelist);

struct ProcessGroupOptions {
  std::string backend = "auto";  ///< auto (nccl on CUDA, gloo on CPUs) | gloo | nccl
  std::string device = "auto";   ///< auto (cuda:<local rank> when CUDA is available) | cpu | cuda
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  ///< rendezvous and every collective
  int default_port = 29500;      ///< when the launcher sets no MASTER_PORT
  std::string section = "strategy";  ///< the config section, named in errors about these options
  /// The config section these options came from, if any: errors about them point at its values'
  /// file:line (Options::fail); without it they name `section`.
  const Options* config = nullptr;
};

struct SessionGroups;

/// This process's membership of the job's process group. Created by join(); every rank must
/// join. Not thread-safe: use it from the training thread.
class DistributedSession {
 public:
  /// Reads the launch environment and joins the process group: one process alone (a log line
  /// says so) when no launcher is set. Throws ConfigError for impossible options (nccl on a CPU)
  /// and wanfw::Error when the rendezvous fails, naming the address and what to check.
  static std::unique_ptr<DistributedSession> join(const ProcessGroupOptions& options);
  /// Joins with an explicit launch environment (tests, custom launchers).
  static std::unique_ptr<DistributedSession> join(const ProcessGroupOptions& options, const LaunchEnvironment& launch);
  ~DistributedSession();
  DistributedSession(const DistributedSession&) = delete;
  DistributedSession& operator=(const DistributedSession&) = delete;

  const LaunchEnvironment& launch() const;
  int rank() const { return launch().rank; }
  int world_size() const { return launch().world_size; }
  int local_rank() const { return launch().local_rank; }
  /// cuda:<local rank>, or the CPU.
  c10::Device device() const;
  /// "gloo" or "nccl".
  const std::string& backend() const;
  /// "rank 0 of 2 (local rank 0), backend gloo, device cpu, launched by torchrun"
  std::string describe() const;

  /// The c10d process group, for what the helpers below do not cover (c10d::Reducer, say).
  /// Include <torch/csrc/distributed/c10d/ProcessGroup.hpp> to call it.
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const;

  /// Runs `body`, which issues collectives. When one fails (a rank died, a timeout), throws
  /// wanfw::Error "rank R: <what> failed: ..." naming the ranks that stopped responding;
  /// wanfw::Errors thrown by `body` itself pass unchanged.
  void guarded(const std::string& what, const std::function<void()>& body) const;

  using Reduce = wanfw::Reduce;
  /// Reduces `tensors` in place across every rank (each rank passes tensors of the same shapes and
  /// dtypes, in the same order). Tensors are packed into a few large messages.
  void all_reduce(const std::vector<at::Tensor>& tensors, Reduce op = Reduce::Sum) const;
  /// Small values reduced across every rank (each passes as many): what Strategy::all_reduce returns.
  std::vector<double> all_reduce(std::vector<double> values, Reduce op) const;
  /// Every rank's `tensors` become `root`'s, in place.
  void broadcast(const std::vector<at::Tensor>& tensors, int root = 0) const;
  /// `root`'s values on every rank: what Strategy::broadcast returns.
  std::vector<double> broadcast(std::vector<double> values, int root = 0) const;
  /// Blocks until every rank arrives.
  void barrier() const;

  // Collectives of sharded training (fully sharded parameters, sequence parallelism). Every
  // tensor is contiguous, on the session's device, of one dtype on every rank; every rank passes
  // the same sizes. Outputs are written in place. Not differentiable: an autograd function that
  // needs one pairs it with its transpose (all-gather <-> reduce-scatter, all-to-all <-> itself).

  /// Every rank's `input` side by side in `output` (world_size x input.numel() elements): rank
  /// r's input at offset r x input.numel().
  void all_gather(const at::Tensor& output, const at::Tensor& input) const;
  /// all_gather, started: the transfer runs while the caller goes on, and `wait()` on the result
  /// finishes it (every rank waits for its collectives in the order it started them). `output`
  /// and `input` must live until then. What fully sharded training prefetches with.
  class PendingGather;
  PendingGather start_all_gather(const at::Tensor& output, const at::Tensor& input) const;
  /// `input` (world_size x output.numel() elements) reduced across the ranks; rank r receives
  /// the reduced chunk r. Reduce::Mean divides the sum by the world size on every backend, so
  /// Gloo and NCCL give the same numbers.
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input, Reduce op = Reduce::Sum) const;
  /// `input` split along dim 0 into world_size equal chunks, chunk k sent to rank k; `output`
  /// (the same shape) receives rank r's chunk at chunk r.
  void all_to_all(const at::Tensor& output, const at::Tensor& input) const;

  /// The job's ranks in groups of `group_size` contiguous ranks (g·size .. g·size + size - 1),
  /// each group a session of its own (`within`: a sequence-parallel group, ideally inside one
  /// node), and the ranks at the same place of every group as another (`across`: data parallel
  /// across the groups). Every rank calls it, in the same order, with the same size. This session
  /// must outlive both; a failed collective in either names the job's lost ranks. Throws
  /// wanfw::Error when the world does not divide into groups of that size.
  SessionGroups split(int group_size) const;
  /// split() for another purpose (`purpose`: a name of its own, as "replicate"): the same groups
  /// of ranks as sessions apart from those of another purpose (as sequence parallelism's split).
  SessionGroups split(int group_size, const std::string& purpose) const;
  /// The ranks of this rank's network group (wanfw/parallel/network_groups.hpp; groups of any sizes) as a
  /// session of their own. Every rank calls it, in the same order, with the same groups. This
  /// session must outlive it.
  std::unique_ptr<DistributedSession> network_group(const NetworkGroups& groups) const;

  struct Impl;

 private:
  explicit DistributedSession(std::unique_ptr<Impl> impl);
  /// A session over this one's store, for group `group` of the kind `kind`, as its rank `rank`
  /// of `size`.
  std::unique_ptr<DistributedSession> group_session(const std::string& kind, int group, int rank, int size) const;
  std::unique_ptr<Impl> impl_;
};

/// An all-gather in flight (DistributedSession::start_all_gather).
class DistributedSession::PendingGather {
 public:
  struct Work;  ///< the backend's work object (process_group/distributed_session_sharded.cpp)
  PendingGather();
  PendingGather(const DistributedSession* session, std::unique_ptr<Work> work);
  ~PendingGather();
  PendingGather(PendingGather&&) noexcept;
  PendingGather& operator=(PendingGather&&) noexcept;
  /// Blocks until the gathered values are in the output; throws as DistributedSession::guarded
  /// does when the collective failed. Does nothing when nothing is pending.
  void wait();

 private:
  const DistributedSession* session_ = nullptr;
  std::unique_ptr<Work> work_;
};

/// DistributedSession::split's two sessions.
struct SessionGroups {
  std::unique_ptr<DistributedSession> within;  ///< this rank's group of contiguous ranks
  std::unique_ptr<DistributedSession> across;  ///< the ranks at this rank's place in every group
};

}  // namespace wanfw
