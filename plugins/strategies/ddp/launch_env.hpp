#pragma once
// Where this process sits in a multi-process job, read from the launcher's environment:
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*) or SLURM
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the node list). Plain C++: no LibTorch.

#include <functional>
#include <optional>
#include <string>

namespace wanfw::ddp {

struct LaunchEnv {
  std::string launcher;  ///< "torchrun", "slurm", or "" when started alone
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

/// The launch as the environment describes it; `default_port` when SLURM gives no MASTER_PORT.
/// Throws wanfw::Error naming the variable when a value is missing or malformed.
LaunchEnv detect_launch(const EnvLookup& env, int default_port);

/// The first host of a SLURM node list: "gpu[01-04,07],cpu3" -> "gpu01".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace wanfw::ddp
