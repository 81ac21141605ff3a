// DistributedSession, joining and lifetime: the process group of a multi-process job (rendezvous
// store, Gloo or NCCL backend) and the heartbeats that name lost ranks (rank_heartbeat.cpp). Its
// collectives are in distributed_session_collectives.cpp and distributed_session_sharded.cpp, its
// groups in distributed_session_groups.cpp.

#include "wanfw/parallel/distributed.hpp"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include "process_group/distributed_session_impl.hpp"
#include "wanfw/error.hpp"
#include "wanfw/options.hpp"

namespace wanfw {

namespace {

using Milliseconds = std::chrono::milliseconds;

/// Rejects the value of option `key`: at its file:line when the options came from a config section,
/// else naming "<section>.<key>".
[[noreturn]] void fail_option(const ProcessGroupOptions& options, const std::string& key, const std::string& problem,
                              const std::string& hint = "") {
  if (options.config != nullptr) options.config->fail(key, problem, hint);
  throw ConfigError(SourceLocation{}, fmt::format("{}.{}: {}", options.section, key, problem), hint);
}

}  // namespace

c10::Device DistributedSession::Impl::choose_device() const {
  const bool cuda = torch::cuda::is_available();
  if (options.device == "cpu" || (options.device == "auto" && !cuda)) return c10::Device(c10::kCPU);
  if (options.device != "cuda" && options.device != "auto")
    fail_option(options, "device", fmt::format("unknown device '{}'", options.device), "use auto, cpu or cuda");
  if (!cuda)
    fail_option(options, "device", "device cuda was asked for, but no CUDA device is visible",
                "use device: cpu (or auto) to train on CPUs with Gloo");
  const auto count = static_cast<int>(torch::cuda::device_count());
  if (env.local_rank >= count)
    throw Error(fmt::format("local rank {} has no GPU: this node shows {} CUDA device(s)", env.local_rank, count),
                "start as many processes per node as there are GPUs (torchrun --nproc-per-node)");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
}

c10::intrusive_ptr<c10d::Store> DistributedSession::Impl::make_store() const {
  if (env.world_size == 1 && env.launcher.empty()) return c10::make_intrusive<c10d::HashStore>();
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(env.master_port);
  o.timeout = options.timeout;
  try {
    if (env.agent_store) {
      // torchrun's agent hosts the store; this attempt's keys live under their own prefix.
      auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
      return c10::make_intrusive<c10d::PrefixStore>(fmt::format("/worker/attempt_{}", env.restart_count), tcp);
    }
    o.isServer = env.rank == 0;
    o.numWorkers = static_cast<std::size_t>(env.world_size);
    o.multiTenant = true;
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  } catch (const std::exception& e) {
    throw Error(fmt::format("rank {}: cannot reach the rendezvous store at {}:{}: {}", env.rank, env.master_addr,
                            env.master_port, first_line(e.what())),
                fmt::format("if the port is in use, choose another (torchrun --master-port, or MASTER_PORT); if a "
                            "rank never arrived, check that every node can reach MASTER_ADDR and started within {}.timeout_s",
                            options.section));
  }
}

std::string DistributedSession::Impl::lost_ranks() const {
  if (parent != nullptr) return parent->lost_ranks();  // a group's ranks are the job's
  if (env.world_size == 1 || !heartbeat) return "";
  try {
    auto probe = make_store();
    probe->setTimeout(Milliseconds(3000));
    auto counters = [&] {
      std::vector<std::int64_t> out;
      for (int r = 0; r < env.world_size; ++r) out.push_back(probe->add(Heartbeat::key(r), 0));
      return out;
    };
    const auto before = counters();
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    const auto after = counters();
    std::vector<int> lost, absent;  // beat once and stopped; never beat
    for (int r = 0; r < env.world_size; ++r)
      if (r != env.rank && after[r] == before[r]) (after[r] == 0 ? absent : lost).push_back(r);
    if (lost.empty() && absent.empty()) return " (every rank is still alive: a rank may have hung or raised an error)";
    std::vector<std::string> parts;
    if (!lost.empty()) parts.push_back(fmt::format("rank {} stopped responding", fmt::join(lost, ", rank ")));
    if (!absent.empty())
      parts.push_back(fmt::format("rank {} never joined (it did not start, or stopped before the rendezvous)",
                                  fmt::join(absent, ", rank ")));
    return fmt::format(". Lost: {}", fmt::join(parts, "; "));
  } catch (const std::exception&) {
    return fmt::format(". Lost: the rendezvous store at {}:{} is unreachable, so its host ({}) is gone",
                       env.master_addr, env.master_port, env.agent_store ? "the torchrun agent" : "rank 0");
  }
}

std::unique_ptr<DistributedSession> DistributedSession::join(const ProcessGroupOptions& options) {
  const LaunchEnvironment env = detect_launch(process_environment(), options.default_port);
  if (env.launcher.empty())
    spdlog::info("{}: no launcher in the environment (RANK/WORLD_SIZE or SLURM_PROCID): one process; start "
                 "several with torchrun --no-python --nproc-per-node=N",
                 options.section);
  return join(options, env);
}

std::unique_ptr<DistributedSession> DistributedSession::join(const ProcessGroupOptions& options,
                                                             const LaunchEnvironment& launch) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->env = launch;
  if (!(options.timeout.count() > 0)) fail_option(options, "timeout_s", "the process group's timeout must be positive");
  impl->device = impl->choose_device();
  const std::string backend = options.backend == "auto" ? (impl->device.is_cuda() ? "nccl" : "gloo") : options.backend;
  if (backend != "gloo" && backend != "nccl")
    fail_option(options, "backend", fmt::format("unknown backend '{}'", backend), "use auto, gloo or nccl");
  if (backend == "nccl" && !impl->device.is_cuda())
    fail_option(options, "backend", "backend nccl needs CUDA devices, but the device is the CPU",
                "use backend: gloo (or auto) on CPUs");
  impl->backend = backend;
  impl->store = impl->make_store();
  // Beating before the backend connects, so that a rank which stops or dies while the others wait
  // for it there is named too.
  if (launch.world_size > 1) impl->heartbeat = std::make_unique<Heartbeat>(impl->make_store(), launch.rank);
  std::unique_ptr<DistributedSession> session(new DistributedSession(std::move(impl)));
  session->guarded("forming the process group", [&] { session->impl_->build_backend(); });
  session->guarded("joining the process group", [&] { session->impl_->pg->barrier()->wait(); });
  return session;
}

void DistributedSession::Impl::build_backend() {
  const int rank = env.rank, world = env.world_size;
  pg = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world);
  if (backend == "gloo") {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo_options);
    pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  } else {
#ifdef USE_C10D_NCCL
    c10::cuda::set_device(device.index());
    auto nccl_options = c10::make_intrusive<c10d::ProcessGroupNCCL::Options>();
    nccl_options->timeout = options.timeout;
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, nccl_options);
    pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
    pg->setBoundDeviceId(device);
#else
    fail_option(options, "backend", "this build of wanfw has no NCCL backend", "use backend: gloo");
#endif
  }
}

DistributedSession::DistributedSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DistributedSession::~DistributedSession() {
  impl_->heartbeat.reset();
  try {
    if (impl_->pg) impl_->pg->shutdown();
  } catch (const std::exception& e) {
    spdlog::debug("process group shutdown: {}", first_line(e.what()));
  }
}

const LaunchEnvironment& DistributedSession::launch() const { return impl_->env; }
c10::Device DistributedSession::device() const { return impl_->device; }
const std::string& DistributedSession::backend() const { return impl_->backend; }
const c10::intrusive_ptr<c10d::ProcessGroup>& DistributedSession::process_group() const { return impl_->pg; }

std::string DistributedSession::describe() const {
  const auto& env = impl_->env;
  return fmt::format("rank {} of {}{} (local rank {}), backend {}, device {}{}", env.rank, env.world_size,
                     impl_->group.empty() ? "" : " in " + impl_->group, env.local_rank, impl_->backend,
                     impl_->device.str(), env.launcher.empty() ? ", started alone" : ", launched by " + env.launcher);
}

void DistributedSession::guarded(const std::string& what, const std::function<void()>& body) const {
  try {
    body();
  } catch (const Error&) {
    throw;  // wanfw's own errors (the model's, say) pass through
  } catch (const std::exception& e) {
    // c10d's errors (c10::DistBackendError), also when the autograd engine rethrows them.
    throw Error(fmt::format("rank {}{}: {} failed: {}{}", impl_->env.rank,
                            impl_->group.empty() ? "" : " of " + impl_->group, what, first_line(e.what()),
                            impl_->lost_ranks()),
                "the other ranks' logs say why they stopped; resume with --resume auto once the job is restarted "
                "(torchrun --max-restarts restarts it for you)");
  }
}

}  // namespace wanfw
