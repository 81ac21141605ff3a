// Strategy `ddp`: one process per device, gradients averaged across processes by c10d's Reducer
// in buckets while backward still runs; Gloo on CPUs, NCCL on GPUs. Started by torchrun or srun.
// A model that trains in phases gets one reducer per phase: a step reduces its phase's gradients.
// With network_groups, the ranks form one group per network of the model (the A14B experts), and
// each network's gradients are averaged within its group (wanfw/parallel/network_groups.hpp).

#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include "wanfw/parallel/distributed.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parallel/fully_sharded.hpp"
#include "wanfw/log.hpp"
#include "wanfw/parallel/network_groups.hpp"
#include "wanfw/plugin.hpp"
#include "wanfw/parallel/process_group_options.hpp"
#include "wanfw/parallel/sequence_parallel.hpp"

namespace {

using wanfw::option;
using T = wanfw::OptionType;

struct DdpSettings {
  std::size_t bucket_bytes = 0;
  std::size_t first_bucket_bytes = 0;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  int sequence_parallel = 1;
  std::vector<int> network_groups;
};

class DdpStrategy final : public wanfw::Strategy {
 public:
  DdpStrategy(const DdpSettings& settings, std::unique_ptr<wanfw::DistributedSession> session)
      : settings_(settings),
        session_(std::move(session)),
        placement_(*session_, settings.network_groups),
        pg_(placement_.group() != nullptr ? placement_.group()->process_group() : session_->process_group()),
        sequence_(*session_, settings.sequence_parallel) {}

  ~DdpStrategy() override {
    for (auto& phase : reducers_) phase.logger.reset();  // before the reducers, which they report on
    reducers_.clear();
  }

  std::string describe() const override {
    return "ddp: " + session_->describe() + sequence_.describe() + placement_.describe();
  }

  c10::Device device() const override { return session_->device(); }
  int rank() const override { return session_->rank(); }
  int world_size() const override { return session_->world_size(); }
  int data_rank() const override { return sequence_.data_rank(); }
  int data_world_size() const override { return sequence_.data_world_size(); }
  const wanfw::NetworkGroups* network_groups() const override { return placement_.groups(); }

  void setup(wanfw::Model& model) override {
    model.module()->to(device());
    sequence_.attach(model);
    std::vector<at::Tensor> parameters;
    for (auto& [name, tensor] : model.trainable_parameters()) parameters.push_back(tensor);
    for (const auto& buffer : model.module()->buffers()) buffers_.push_back(buffer);
    // Every rank of a group holds the same network (the whole model without network groups).
    const wanfw::DistributedSession& replicas = placement_.group() != nullptr ? *placement_.group() : *session_;
    replicas.guarded("checking that every rank built the same model", [&] {
      c10d::verify_params_across_processes(pg_, parameters, std::nullopt);
    });
    // The first rank's initial weights on every replica.
    std::vector<at::Tensor> state = parameters;
    state.insert(state.end(), buffers_.begin(), buffers_.end());
    replicas.broadcast(state, 0);
    // A model that trains in phases gets a reducer per phase: a step reduces the gradients of its
    // phase's parameters only, and the other phases' parameters, which get none, are not waited for.
    const std::vector<wanfw::TrainingPhase> phases = model.phases();
    for (int p = 0; p < std::max<int>(1, static_cast<int>(phases.size())); ++p) {
      reducers_.push_back(make_reducer(model.phase_parameters(p)));
      if (is_main() && reducers_.back().reducer)
        wanfw::log::info(fmt::format(
            "ddp: {}{} parameters in {} gradient bucket(s) of up to {} MiB, averaged over {} processes{}",
            phases.empty() ? "" : "phase " + phases[static_cast<std::size_t>(p)].name + ": ",
            reducers_.back().parameters, reducers_.back().buckets, settings_.bucket_bytes >> 20,
            replicas.world_size(), placement_.group() != nullptr ? " of this rank's network group" : ""));
    }
  }

  wanfw::StepOutput micro_step(wanfw::Model& model, const wanfw::Batch& batch,
                               const wanfw::MicroStep& micro) override {
    wanfw::StepOutput out;
    placement_.count(micro);
    const std::shared_ptr<c10d::Reducer>& reducer = reducers_.at(static_cast<std::size_t>(micro.phase)).reducer;
    if (!reducer) return Strategy::micro_step(model, batch, micro);  // a phase without parameters
    session_->guarded("the forward and backward pass", [&] {
      if (reducer->rebuild_buckets()) wanfw::log::debug("ddp: gradient buckets rebuilt in backward order");
      if (micro.sync_gradients) {
        reducer->prepare_for_forward();
        if (settings_.broadcast_buffers && !buffers_.empty()) {
          torch::NoGradGuard no_grad;
          c10d::broadcast_coalesced(pg_, buffers_, 256u << 20, 0);  // inside the guard above
        }
      }
      out = forward(model, batch, micro);
      // Only the last micro-batch of a step reduces; the others accumulate locally.
      if (micro.sync_gradients)
        reducer->prepare_for_backward(settings_.find_unused_parameters ? std::vector<at::Tensor>{out.loss}
                                                                        : std::vector<at::Tensor>{});
      backward(out, micro, placement_.loss_scale());
      if (micro.sync_gradients && !settings_.find_unused_parameters) ensure_every_gradient_reduced(*reducer);
    });
    return out;
  }

  void before_optimizer_step(wanfw::Model& model) override {
    if (placement_.groups() == nullptr) return;
    std::vector<at::Tensor> parameters;
    for (auto& [name, tensor] : model.trainable_parameters()) parameters.push_back(tensor);
    placement_.settle(parameters);  // a network without samples this step: skipped, as on one device
  }

  double clip_gradients(const std::vector<at::Tensor>& parameters, double max_norm) override {
    if (placement_.groups() == nullptr) return Strategy::clip_gradients(parameters, max_norm);
    std::vector<at::Tensor> grads;
    for (const at::Tensor& p : parameters) grads.push_back(p.grad());
    return wanfw::clip_to_norm(grads, placement_.gradient_norm(grads), max_norm);  // every network's norm
  }

  std::vector<double> all_reduce(std::vector<double> values, wanfw::Reduce op) override {
    return session_->all_reduce(std::move(values), op);
  }
  std::vector<double> broadcast(std::vector<double> values) override { return session_->broadcast(std::move(values)); }

  void barrier() override { session_->barrier(); }
  // Evaluation (validation, the main process's previews) runs whole sequences.
  void begin_evaluation(wanfw::Model& model) override { sequence_.detach(model); }
  void end_evaluation(wanfw::Model& model) override { sequence_.attach(model); }

 private:
  // A parameter without a gradient leaves its bucket unreduced on this rank while the others
  // reduce theirs; the next collective would then meet the wrong one (a crash in the transport).
  // Stopped here, before any: this rank names the cause, the others see it stop.
  void ensure_every_gradient_reduced(c10d::Reducer& reducer) {
    try {
      reducer.check_finalized();
    } catch (const c10::Error&) {
      throw wanfw::Error(
          fmt::format("rank {}: some trainable parameters got no gradient in this step, so ddp could not average "
                      "them (a model of two experts, for one: a micro-batch whose samples all fall on one expert "
                      "leaves the other without one)",
                      rank()),
          "set strategy.find_unused_parameters: true");
    }
  }

  DdpSettings settings_;
  std::unique_ptr<wanfw::DistributedSession> session_;
  wanfw::NetworkPlacement placement_;  ///< network groups (none by default)
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;  ///< what gradients are averaged over: the job, or the network group
  /// One training phase's gradient reduction (null reducer: the phase has no parameters).
  struct PhaseReducer {
    std::shared_ptr<c10d::Reducer> reducer;
    std::shared_ptr<c10d::Logger> logger;
    std::size_t parameters = 0, buckets = 0;
  };

  PhaseReducer make_reducer(const std::vector<std::pair<std::string, at::Tensor>>& named) {
    PhaseReducer out;
    if (named.empty()) return out;
    std::vector<at::Tensor> parameters;
    std::unordered_map<std::size_t, std::string> names;
    for (const auto& [name, tensor] : named) {
      names[parameters.size()] = name;
      parameters.push_back(tensor);
    }
    // Buckets in reverse parameter order: gradients become ready from the last layer back.
    const std::vector<bool> sparse(parameters.size(), false);
    auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(
        parameters, {settings_.first_bucket_bytes, settings_.bucket_bytes}, sparse);
    std::reverse(buckets.begin(), buckets.end());
    out.parameters = parameters.size();
    out.buckets = buckets.size();
    out.reducer = std::make_shared<c10d::Reducer>(
        parameters, buckets, pg_, sparse, static_cast<std::int64_t>(settings_.bucket_bytes),
        settings_.find_unused_parameters, /*gradient_as_bucket_view=*/false, names,
        static_cast<std::int64_t>(settings_.first_bucket_bytes), /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false,
        std::vector<std::int64_t>{static_cast<std::int64_t>(settings_.first_bucket_bytes),
                                  static_cast<std::int64_t>(settings_.bucket_bytes)});
    // The reducer reports to a logger it holds weakly, and without one it dereferences nothing:
    // with find_unused_parameters, from the second step on.
    out.logger = std::make_shared<c10d::Logger>(out.reducer);
    out.reducer->set_logger(out.logger);
    return out;
  }

  std::vector<PhaseReducer> reducers_;  ///< one per training phase
  std::vector<at::Tensor> buffers_;
  wanfw::SequenceGroups sequence_;  ///< sequence parallelism: the ranks sharing each sample
};

std::unique_ptr<wanfw::Strategy> make_strategy(const wanfw::Options& o, const wanfw::PluginContext& ctx) {
  DdpSettings s;
  const double bucket = o.number("bucket_mb"), first = o.number("first_bucket_mb");
  if (!(bucket > 0) || !(first > 0)) o.fail("bucket_mb", "bucket sizes must be positive");
  s.bucket_bytes = static_cast<std::size_t>(bucket * (1 << 20));
  s.first_bucket_bytes = static_cast<std::size_t>(first * (1 << 20));
  s.find_unused_parameters = o.boolean("find_unused_parameters");
  s.broadcast_buffers = o.boolean("broadcast_buffers");
  const wanfw::StrategyLayout layout = wanfw::rank_layout_of(o);
  s.sequence_parallel = layout.sequence_parallel;
  s.network_groups = layout.network_groups;
  return std::make_unique<DdpStrategy>(s, wanfw::DistributedSession::join(wanfw::process_group_options(o, ctx)));
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_strategy(
      "ddp", "0.1.0", "Distributed data parallel: one process per device (torchrun or srun), gradients averaged in "
                      "buckets during backward; Gloo on CPUs, NCCL on GPUs.");
  d.options = wanfw::process_group_schema();
  d.options.insert(
      d.options.end(),
      {option("bucket_mb", T::Number).value("25").doc("Gradient bucket size in MiB (reduced while backward runs)."),
       option("first_bucket_mb", T::Number).value("1").doc("Size of the first bucket, so the last layers start early."),
       option("find_unused_parameters", T::Boolean).value("false").doc(
           "Allow parameters that get no gradient in a step (e.g. expert: both with every sample on one expert)."),
       option("broadcast_buffers", T::Boolean).value("true").doc("Copy rank 0's buffers to every rank before each step."),
       wanfw::network_groups_option("each rank holds its group's network alone, its gradients averaged within "
                                    "the group")});
  d.capabilities.places_networks = true;
  d.make_strategy = make_strategy;
  d.strategy_layout = wanfw::rank_layout_of;
  return d;
}

}  // namespace

WANFW_PLUGIN(Strategy, describe)
