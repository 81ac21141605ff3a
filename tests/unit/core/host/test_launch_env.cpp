#include <map>

#include "wanfw/parallel/distributed.hpp"
#include "wanfw/error.hpp"
#include <doctest/doctest.h>

using wanfw::detect_launch;
using wanfw::first_slurm_host;

namespace {
wanfw::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}
}  // namespace

TEST_CASE("torchrun's environment gives rank, world, local rank, master and the agent store") {
  const auto e = detect_launch(env_of({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29400"},
                                       {"TORCHELASTIC_RUN_ID", "job"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                       {"TORCHELASTIC_RESTART_COUNT", "2"}}),
                               29500);
  CHECK(e.launcher == "torchrun");
  CHECK(e.rank == 3);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "node7");
  CHECK(e.master_port == 29400);
  CHECK(e.agent_store);
  CHECK(e.restart_count == 2);
}

TEST_CASE("SLURM's environment gives the ranks and the first node as master") {
  const auto e = detect_launch(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                                       {"SLURM_NTASKS_PER_NODE", "4(x2)"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"}}),
                               29500);
  CHECK(e.launcher == "slurm");
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "gpu07");
  CHECK(e.master_port == 29500);
  CHECK_FALSE(e.agent_store);
}

TEST_CASE("torchrun's variables win over SLURM's when torchrun runs inside a SLURM job") {
  const auto e = detect_launch(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"},
                                       {"TORCHELASTIC_RUN_ID", "x"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}}),
                               29500);
  CHECK(e.launcher == "torchrun");
  CHECK(e.world_size == 2);
}

TEST_CASE("no launcher variables mean one process") {
  const auto e = detect_launch(env_of({}), 29500);
  CHECK(e.launcher.empty());
  CHECK(e.world_size == 1);
}

TEST_CASE("a malformed or inconsistent launch environment is refused naming the variable") {
  CHECK_THROWS_WITH_AS(detect_launch(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"},
                                             {"MASTER_PORT", "1"}}), 29500),
                       doctest::Contains("RANK='x'"), wanfw::Error);
  CHECK_THROWS_WITH_AS(detect_launch(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"},
                                             {"MASTER_PORT", "1"}}), 29500),
                       doctest::Contains("rank 2 is outside the world of 2"), wanfw::Error);
  CHECK_THROWS_WITH_AS(detect_launch(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}), 29500),
                       doctest::Contains("MASTER_ADDR"), wanfw::Error);
}

TEST_CASE("the first host of a SLURM node list") {
  CHECK(first_slurm_host("gpu[01-04,07],cpu3") == "gpu01");
  CHECK(first_slurm_host("node5,node6") == "node5");
  CHECK(first_slurm_host("solo") == "solo");
  CHECK(first_slurm_host("rack1-n[3,5]-ib") == "rack1-n3-ib");
}
