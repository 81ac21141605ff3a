// Strategy `ddp`: one process per device, gradients averaged across processes by c10d's Reducer
// in buckets while backward still runs; Gloo on CPUs, NCCL on GPUs. Started by torchrun or srun.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "launch_env.hpp"
#include "wanfw/error.hpp"
#include "wanfw/plugin.hpp"

namespace {

using wanfw::option;
using wanfw::ddp::LaunchEnv;
using T = wanfw::OptionType;
using Milliseconds = std::chrono::milliseconds;

struct DdpSettings {
  std::string backend;  ///< auto | gloo | nccl
  std::string device;   ///< auto | cpu | cuda
  Milliseconds timeout{};
  std::size_t bucket_bytes = 0;
  std::size_t first_bucket_bytes = 0;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
};

/// The first line of a c10d error (the rest is a C++ stack).
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

/// Bumps a per-rank counter in the store every second, so that after a failed collective the
/// survivors can tell which ranks have stopped.
class Heartbeat {
 public:
  Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank) : store_(std::move(store)), rank_(rank) {
    beat();
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
        lock.unlock();
        try {
          beat();
        } catch (const std::exception&) {
          // The store's host is gone; diagnosis says so.
        }
        lock.lock();
      }
    });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  static std::string key(int rank) { return fmt::format("wanfw/heartbeat/{}", rank); }

 private:
  void beat() { store_->add(key(rank_), 1); }

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

class DdpStrategy final : public wanfw::Strategy {
 public:
  DdpStrategy(const DdpSettings& settings, const LaunchEnv& env) : settings_(settings), env_(env) {
    device_ = choose_device();
    const std::string backend = settings_.backend == "auto" ? (device_.is_cuda() ? "nccl" : "gloo") : settings_.backend;
    if (backend == "nccl" && !device_.is_cuda())
      throw wanfw::ConfigError({"strategy.backend", 0, 0}, "backend nccl needs CUDA devices, but the device is the CPU",
                               "use backend: gloo (or auto) on CPUs");
    backend_name_ = backend;
    store_ = make_store();
    pg_ = c10::make_intrusive<c10d::ProcessGroup>(store_, env_.rank, env_.world_size);
    if (backend == "gloo") {
      auto options = c10d::ProcessGroupGloo::Options::create(settings_.timeout);
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env_.rank, env_.world_size, options);
      pg_->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
      pg_->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    } else {
#ifdef USE_C10D_NCCL
      c10::cuda::set_device(device_.index());
      auto options = c10::make_intrusive<c10d::ProcessGroupNCCL::Options>();
      options->timeout = settings_.timeout;
      auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, env_.rank, env_.world_size, options);
      pg_->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
      pg_->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
      pg_->setBoundDeviceId(device_);
#else
      throw wanfw::ConfigError({"strategy.backend", 0, 0}, "this build of wanfw has no NCCL backend");
#endif
    }
    if (env_.world_size > 1) heartbeat_ = std::make_unique<Heartbeat>(make_store(), env_.rank);
    guarded("joining the process group", [&] { pg_->barrier()->wait(); });
  }

  ~DdpStrategy() override {
    heartbeat_.reset();
    reducer_.reset();
    try {
      if (pg_) pg_->shutdown();
    } catch (const std::exception& e) {
      spdlog::debug("process group shutdown: {}", first_line(e.what()));
    }
  }

  std::string describe() const override {
    return fmt::format("ddp: rank {} of {} (local rank {}), backend {}, device {}{}", env_.rank, env_.world_size,
                       env_.local_rank, backend_name_, device_.str(),
                       env_.launcher.empty() ? ", started alone" : ", launched by " + env_.launcher);
  }

  c10::Device device() const override { return device_; }
  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }

  void setup(wanfw::Model& model) override {
    model.module()->to(device_);
    for (auto& [name, tensor] : model.trainable_parameters()) {
      names_.push_back(name);
      parameters_.push_back(tensor);
    }
    for (const auto& buffer : model.module()->buffers()) buffers_.push_back(buffer);
    guarded("checking that every rank built the same model", [&] {
      c10d::verify_params_across_processes(pg_, parameters_, std::nullopt);
    });
    // Rank 0's initial weights everywhere.
    guarded("broadcasting the weights from rank 0", [&] {
      torch::NoGradGuard no_grad;
      std::vector<at::Tensor> state = parameters_;
      state.insert(state.end(), buffers_.begin(), buffers_.end());
      c10d::broadcast_coalesced(pg_, state, 256u << 20, 0);
    });
    // Buckets in reverse parameter order: gradients become ready from the last layer back.
    const std::vector<bool> sparse(parameters_.size(), false);
    auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(
        parameters_, {settings_.first_bucket_bytes, settings_.bucket_bytes}, sparse);
    std::reverse(buckets.begin(), buckets.end());
    std::unordered_map<std::size_t, std::string> names;
    for (std::size_t i = 0; i < names_.size(); ++i) names[i] = names_[i];
    reducer_ = std::make_unique<c10d::Reducer>(
        parameters_, buckets, pg_, sparse, static_cast<std::int64_t>(settings_.bucket_bytes),
        settings_.find_unused_parameters, /*gradient_as_bucket_view=*/false, names,
        static_cast<std::int64_t>(settings_.first_bucket_bytes), /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false,
        std::vector<std::int64_t>{static_cast<std::int64_t>(settings_.first_bucket_bytes),
                                  static_cast<std::int64_t>(settings_.bucket_bytes)});
    if (is_main())
      spdlog::info("ddp: {} parameters in {} gradient bucket(s) of up to {} MiB, averaged over {} processes",
                   parameters_.size(), buckets.size(), settings_.bucket_bytes >> 20, env_.world_size);
  }

  wanfw::StepOutput micro_step(wanfw::Model& model, const wanfw::Batch& batch,
                               const wanfw::MicroStep& micro) override {
    wanfw::StepOutput out;
    guarded("the forward and backward pass", [&] {
      if (reducer_->rebuild_buckets()) spdlog::debug("ddp: gradient buckets rebuilt in backward order");
      if (micro.sync_gradients) {
        reducer_->prepare_for_forward();
        if (settings_.broadcast_buffers && !buffers_.empty()) {
          torch::NoGradGuard no_grad;
          c10d::broadcast_coalesced(pg_, buffers_, 256u << 20, 0);
        }
      }
      out = forward(model, batch, micro);
      // Only the last micro-batch of a step reduces; the others accumulate locally.
      if (micro.sync_gradients)
        reducer_->prepare_for_backward(settings_.find_unused_parameters ? std::vector<at::Tensor>{out.loss}
                                                                        : std::vector<at::Tensor>{});
      backward(out, micro);
    });
    return out;
  }

  std::map<std::string, double> reduce_metrics(std::map<std::string, double> metrics) override {
    if (env_.world_size == 1 || metrics.empty()) return metrics;
    std::vector<double> values;
    for (const auto& [name, value] : metrics) values.push_back(value);
    std::vector<at::Tensor> tensors = {torch::tensor(values, torch::kFloat64).to(device_)};
    guarded("averaging the metrics", [&] { pg_->allreduce(tensors)->wait(); });
    const at::Tensor averaged = (tensors[0] / env_.world_size).cpu();
    std::size_t i = 0;
    for (auto& [name, value] : metrics) value = averaged[static_cast<std::int64_t>(i++)].item<double>();
    return metrics;
  }

  void barrier() override {
    guarded("a barrier", [&] { pg_->barrier()->wait(); });
  }

 private:
  c10::Device choose_device() const {
    const bool cuda = torch::cuda::is_available();
    if (settings_.device == "cpu" || (settings_.device == "auto" && !cuda)) return c10::Device(c10::kCPU);
    if (!cuda)
      throw wanfw::ConfigError({"strategy.device", 0, 0}, "device cuda was asked for, but no CUDA device is visible",
                               "use device: cpu (or auto) to train on CPUs with Gloo");
    const auto count = static_cast<int>(torch::cuda::device_count());
    if (env_.local_rank >= count)
      throw wanfw::Error(fmt::format("local rank {} has no GPU: this node shows {} CUDA device(s)", env_.local_rank,
                                     count),
                         "start as many processes per node as there are GPUs (torchrun --nproc-per-node)");
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env_.local_rank));
  }

  c10::intrusive_ptr<c10d::Store> make_store() const {
    if (env_.world_size == 1 && env_.launcher.empty()) return c10::make_intrusive<c10d::HashStore>();
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(env_.master_port);
    o.timeout = settings_.timeout;
    try {
      if (env_.agent_store) {
        // torchrun's agent hosts the store; this attempt's keys live under their own prefix.
        auto tcp = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, o);
        return c10::make_intrusive<c10d::PrefixStore>(fmt::format("/worker/attempt_{}", env_.restart_count), tcp);
      }
      o.isServer = env_.rank == 0;
      o.numWorkers = static_cast<std::size_t>(env_.world_size);
      o.multiTenant = true;
      return c10::make_intrusive<c10d::TCPStore>(env_.master_addr, o);
    } catch (const std::exception& e) {
      throw wanfw::Error(
          fmt::format("rank {}: cannot reach the rendezvous store at {}:{}: {}", env_.rank, env_.master_addr,
                      env_.master_port, first_line(e.what())),
          "if the port is in use, choose another (torchrun --master-port, or MASTER_PORT); if a rank never "
          "arrived, check that every node can reach MASTER_ADDR and started within strategy.timeout_s");
    }
  }

  /// Runs a collective; on failure finds which ranks stopped and says so.
  template <typename F>
  void guarded(const char* what, F&& body) {
    try {
      body();
    } catch (const wanfw::Error&) {
      throw;  // the model's own errors pass through
    } catch (const std::exception& e) {
      // c10d's errors (c10::DistBackendError), also when the autograd engine rethrows them.
      throw wanfw::Error(fmt::format("rank {}: {} failed: {}{}", env_.rank, what, first_line(e.what()),
                                     lost_ranks()),
                         "the other ranks' logs say why they stopped; resume with --resume auto once the job "
                         "is restarted (torchrun --max-restarts restarts it for you)");
    }
  }

  /// " Rank(s) 1 stopped responding." when their heartbeat has stalled; "" when all beat.
  std::string lost_ranks() const {
    if (env_.world_size == 1 || !heartbeat_) return "";
    try {
      auto store = make_store();
      store->setTimeout(Milliseconds(3000));
      auto counters = [&] {
        std::vector<std::int64_t> out;
        for (int r = 0; r < env_.world_size; ++r) out.push_back(store->add(Heartbeat::key(r), 0));
        return out;
      };
      const auto before = counters();
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      const auto after = counters();
      std::vector<int> lost;
      for (int r = 0; r < env_.world_size; ++r)
        if (r != env_.rank && after[r] == before[r]) lost.push_back(r);
      if (lost.empty()) return " (every rank is still alive: a rank may have hung or raised an error)";
      return fmt::format(". Lost: rank {} stopped responding", fmt::join(lost, ", rank "));
    } catch (const std::exception&) {
      return fmt::format(". Lost: the rendezvous store at {}:{} is unreachable, so its host ({}) is gone",
                         env_.master_addr, env_.master_port, env_.agent_store ? "the torchrun agent" : "rank 0");
    }
  }

  DdpSettings settings_;
  LaunchEnv env_;
  c10::Device device_{c10::kCPU};
  std::string backend_name_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<c10d::Reducer> reducer_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> parameters_, buffers_;
};

std::unique_ptr<wanfw::Strategy> make_strategy(const wanfw::Options& o, const wanfw::PluginContext&) {
  DdpSettings s;
  s.backend = o.string("backend");
  s.device = o.string("device");
  const double timeout = o.number("timeout_s");
  if (!(timeout > 0)) o.fail("timeout_s", "must be positive");
  s.timeout = Milliseconds(static_cast<std::int64_t>(timeout * 1000));
  const double bucket = o.number("bucket_mb"), first = o.number("first_bucket_mb");
  if (!(bucket > 0) || !(first > 0)) o.fail("bucket_mb", "bucket sizes must be positive");
  s.bucket_bytes = static_cast<std::size_t>(bucket * (1 << 20));
  s.first_bucket_bytes = static_cast<std::size_t>(first * (1 << 20));
  s.find_unused_parameters = o.boolean("find_unused_parameters");
  s.broadcast_buffers = o.boolean("broadcast_buffers");
  const LaunchEnv env =
      wanfw::ddp::detect_launch(wanfw::ddp::process_environment(), static_cast<int>(o.integer("master_port")));
  if (env.launcher.empty())
    spdlog::info("ddp: no launcher in the environment (RANK/WORLD_SIZE or SLURM_PROCID): one process; start "
                 "several with torchrun --no-python --nproc-per-node=N");
  return std::make_unique<DdpStrategy>(s, env);
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_strategy(
      "ddp", "0.1.0", "Distributed data parallel: one process per device (torchrun or srun), gradients averaged in "
                      "buckets during backward; Gloo on CPUs, NCCL on GPUs.");
  d.options = {
      option("backend", T::Choice).value("auto").choices({"auto", "gloo", "nccl"}).doc(
          "Collective backend: nccl on CUDA devices and gloo on CPUs (auto), or forced."),
      option("device", T::Choice).value("auto").choices({"auto", "cpu", "cuda"}).doc(
          "cuda:<LOCAL_RANK> when CUDA is available (auto), or forced."),
      option("timeout_s", T::Number).value("1800").doc(
          "Seconds a collective (or the rendezvous) may wait for the other ranks before the run fails."),
      option("bucket_mb", T::Number).value("25").doc("Gradient bucket size in MiB (reduced while backward runs)."),
      option("first_bucket_mb", T::Number).value("1").doc("Size of the first bucket, so the last layers start early."),
      option("find_unused_parameters", T::Boolean).value("false").doc(
          "Allow parameters that get no gradient in a step (e.g. expert: both with every sample on one expert)."),
      option("broadcast_buffers", T::Boolean).value("true").doc("Copy rank 0's buffers to every rank before each step."),
      option("master_port", T::Integer).value("29500").doc(
          "Rendezvous port when the launcher sets no MASTER_PORT (SLURM without it)."),
  };
  d.make_strategy = make_strategy;
  return d;
}

}  // namespace

WANFW_PLUGIN(describe)
