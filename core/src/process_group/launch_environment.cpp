#include "wanfw/parallel/distributed.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wanfw {

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace {

int integer(const EnvLookup& env, const std::string& name, std::optional<int> fallback = std::nullopt) {
  const auto value = env(name);
  if (!value || value->empty()) {
    if (fallback) return *fallback;
    throw Error(fmt::format("the launcher set no {}", name),
                "start multi-process runs with torchrun (torchrun --no-python --nproc-per-node=N wanfw run CFG) "
                "or srun");
  }
  // SLURM writes counts per node like "2(x3)": the leading number is the one wanted.
  std::size_t used = 0;
  int parsed = 0;
  try {
    parsed = std::stoi(*value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || parsed < 0)
    throw Error(fmt::format("environment variable {}='{}' is not a non-negative integer", name, *value));
  return parsed;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  const auto open = first.find('[');
  if (open == std::string::npos) return first;
  // prefix[01-04,07]suffix -> prefix01suffix: the first number of the first range, as written.
  const auto close = first.find(']', open);
  const std::string ranges = first.substr(open + 1, close - open - 1);
  const std::string head = ranges.substr(0, ranges.find_first_of(",-"));
  return first.substr(0, open) + head + (close == std::string::npos ? "" : first.substr(close + 1));
}

LaunchEnvironment detect_launch(const EnvLookup& env, int default_port) {
  LaunchEnvironment e;
  e.master_port = default_port;
  if (env("RANK") && env("WORLD_SIZE")) {
    e.launcher = env("TORCHELASTIC_RUN_ID") ? "torchrun" : "environment";
    e.rank = integer(env, "RANK");
    e.world_size = integer(env, "WORLD_SIZE");
    e.local_rank = integer(env, "LOCAL_RANK", 0);
    e.local_world_size = integer(env, "LOCAL_WORLD_SIZE", 1);
    e.master_addr = env("MASTER_ADDR").value_or("");
    if (e.master_addr.empty())
      throw Error("RANK and WORLD_SIZE are set but MASTER_ADDR is not",
                  "set MASTER_ADDR and MASTER_PORT, or start with torchrun, which sets them");
    e.master_port = integer(env, "MASTER_PORT");
    e.agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
    e.restart_count = integer(env, "TORCHELASTIC_RESTART_COUNT", 0);
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    e.launcher = "slurm";
    e.rank = integer(env, "SLURM_PROCID");
    e.world_size = integer(env, "SLURM_NTASKS");
    e.local_rank = integer(env, "SLURM_LOCALID", 0);
    e.local_world_size = integer(env, "SLURM_NTASKS_PER_NODE", 1);
    std::string master = env("MASTER_ADDR").value_or("");
    if (master.empty()) master = first_slurm_host(env("SLURM_JOB_NODELIST").value_or(env("SLURM_NODELIST").value_or("")));
    if (master.empty())
      throw Error("under SLURM, neither MASTER_ADDR nor SLURM_JOB_NODELIST names the master host",
                  "export MASTER_ADDR in the batch script");
    e.master_addr = master;
    e.master_port = integer(env, "MASTER_PORT", default_port);
  }
  if (e.world_size < 1) throw Error(fmt::format("world size {} is not positive", e.world_size));
  if (e.rank >= e.world_size)
    throw Error(fmt::format("rank {} is outside the world of {} processes", e.rank, e.world_size));
  if (e.master_port < 1 || e.master_port > 65535)
    throw Error(fmt::format("master port {} is outside 1..65535", e.master_port));
  return e;
}

}  // namespace wanfw
