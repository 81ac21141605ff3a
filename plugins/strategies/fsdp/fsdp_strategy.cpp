#include "fsdp_strategy.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"
#include "wanfw/log.hpp"
#include "wanfw/parallel/fully_sharded.hpp"

namespace wanfw_fsdp {

FsdpStrategy::FsdpStrategy(FsdpSettings settings, std::unique_ptr<wanfw::DistributedSession> session)
    : settings_(settings),
      session_(std::move(session)),
      placement_(*session_, settings_.network_groups),
      sequence_(*session_, settings.sequence_parallel) {
  rest_.name = "the rest";
  replicas_ = replica_groups(holders(), settings_, placement_.groups() != nullptr);
}

// The model may be gone first (an experiment destroys it before its strategy), and it runs no
// unit after training: its runner pointer is left as it is.
FsdpStrategy::~FsdpStrategy() = default;

std::string FsdpStrategy::describe() const {
  const std::string hybrid =
      replicas_.within ? fmt::format(", {} replica groups of {} ranks (this rank: group {})", settings_.replicate,
                                     replicas_.within->world_size(), replicas_.across->rank())
                       : "";
  return "fsdp: " + session_->describe() + sequence_.describe() + placement_.describe() + hybrid;
}

void FsdpStrategy::setup(wanfw::Model& model) {
  for (const auto& p : model.module()->named_parameters())
    if (at::isFloat8Type(p.value().scalar_type()))
      throw wanfw::Error(fmt::format("fsdp: parameter {} is stored in {}: fsdp does not shard an fp8 base", p.key(),
                                     c10::toString(p.value().scalar_type())),
                         "train on the fp8 base with ddp or single (each rank keeps the whole base, half of "
                         "bfloat16's bytes), or set model.base_dtype: dtype to shard it");
  model.module()->to(device());
  sequence_.attach(model);
  holders().guarded("giving every rank its first rank's initial weights", [&] {
    std::vector<at::Tensor> state;
    for (const auto& p : model.module()->parameters()) state.push_back(p);
    for (const auto& b : model.module()->buffers()) state.push_back(b);
    holders().broadcast(state, 0);
  });
  build_units(model);
  if (settings_.host_state) place_state_on_host();
  fetcher_ = std::make_shared<AllGatherFetcher>(units_, rest_, settings_.runner);

  std::int64_t kept = 0;
  for (FlatShard* flat : flats()) {
    kept += flat->shard_bytes();
    for (std::size_t i = 0; i < flat->layout().size(); ++i) {
      const auto& s = flat->layout().shard(i);
      model_bytes_ += s.rows * s.row_numel * static_cast<std::int64_t>(flat->shard().element_size());
    }
  }
  if (is_main())
    wanfw::log::info("fsdp: ", units_.size(), " unit(s) and the rest in ", flats().size(), " flat shard(s) over ",
                     shards().world_size(), " ranks", placement_.groups() ? " of its network group" : "",
                     replicas_.within ? fmt::format(" in each of {} replica groups", settings_.replicate) : "",
                     "; each rank keeps ", fmt::format("{:.1f}", kept / 1048576.0), " of ",
                     fmt::format("{:.1f}", model_bytes_ / 1048576.0), " MiB of parameters",
                     units_.empty() ? " (the model declares no units: all are gathered for each step)" : "");
}

void FsdpStrategy::build_units(wanfw::Model& model) {
  model_groups_ = model.parameter_groups();
  for (const wanfw::TrainingPhase& phase : model.phases()) {
    std::set<int>& groups = phase_groups_.emplace_back();
    for (std::size_t g = 0; g < model_groups_.size(); ++g)
      if (std::find(phase.groups.begin(), phase.groups.end(), model_groups_[g].name) != phase.groups.end())
        groups.insert(static_cast<int>(g));
  }
  for (std::size_t g = 0; g < model_groups_.size(); ++g)
    for (const auto& [name, tensor] : model_groups_[g].parameters)
      group_of_[tensor.unsafeGetTensorImpl()] = static_cast<int>(g);
  std::map<std::string, at::Tensor> by_name;
  std::vector<std::string> order;
  for (const auto& item : model.module()->named_parameters(true)) {
    by_name.emplace(item.key(), item.value());
    order.push_back(item.key());
  }
  std::set<std::string> taken;
  for (const wanfw::Unit& declared : model.units()) {
    std::vector<std::pair<std::string, at::Tensor>> parameters;
    for (const std::string& name : declared.parameters) {
      auto it = by_name.find(name);
      if (it == by_name.end())
        throw wanfw::Error(
            fmt::format("fsdp: unit '{}' names parameter '{}', which the model does not have", declared.name, name),
            "the model plugin's units() must name module() parameters");
      if (!taken.insert(name).second)
        throw wanfw::Error(
            fmt::format("fsdp: parameter '{}' is in two units ('{}' is the second)", name, declared.name),
            "the model plugin's units() must list each parameter once");
      parameters.emplace_back(name, it->second);
    }
    UnitShards& unit = units_.emplace_back();
    unit.name = declared.name;
    cut_unit(unit, parameters);
  }
  std::vector<std::pair<std::string, at::Tensor>> rest;
  for (const std::string& name : order)
    if (!taken.count(name)) rest.emplace_back(name, by_name.at(name));
  cut_unit(rest_, rest);
  for (FlatShard* flat : flats()) flat->release();
}

void FsdpStrategy::place_state_on_host() {
  std::vector<FlatShard*> trained;
  std::int64_t total = 0, copies = 0;
  for (FlatShard* flat : flats())
    if (flat->trainable()) {
      trained.push_back(flat);
      total += 2 * wanfw::arena_slot_bytes(flat->shard().numel(), flat->shard().scalar_type());
    }
  arena_ = wanfw::allocate_host_arena(total, wanfw::HostMemory::Auto, device(), {"fsdp with optimizer.state host", ""});
  std::int64_t offset = 0;
  for (FlatShard* flat : trained) {
    const at::Tensor& shard = flat->shard();
    const std::int64_t bytes = wanfw::arena_slot_bytes(shard.numel(), shard.scalar_type());
    flat->keep_on_host(wanfw::arena_tensor(arena_, offset, shard.sizes(), shard.scalar_type()),
                       wanfw::arena_tensor(arena_, offset + bytes, shard.sizes(), shard.scalar_type()),
                       settings_.runner.compute.value_or(shard.scalar_type()));
    offset += 2 * bytes;
    copies += flat->device_bytes();
  }
  if (is_main())
    wanfw::log::info("fsdp: optimizer.state host: each rank's shards of the trained weights and their gradients in ",
                     arena_.note, " (rank 0's), AdamW's moments and the averages beside them; the device keeps a ",
                     fmt::format("{:.1f}", static_cast<double>(copies) / 1048576.0),
                     " MiB copy the gathers send; each unit's gradients move to the host as they are reduced in "
                     "the step's last micro-batch");
}

void FsdpStrategy::cut_unit(UnitShards& unit, const std::vector<std::pair<std::string, at::Tensor>>& parameters) {
  // Flats in a fixed order: each group's parameters, then the frozen ones; one flat a dtype.
  std::map<std::pair<int, int>, std::vector<std::pair<std::string, at::Tensor>>> buckets;
  for (const auto& [name, tensor] : parameters) {
    auto it = group_of_.find(tensor.unsafeGetTensorImpl());
    const int group = it == group_of_.end() ? static_cast<int>(model_groups_.size()) : it->second;
    buckets[{group, static_cast<int>(tensor.scalar_type())}].emplace_back(name, tensor);
  }
  for (auto& [key, members] : buckets) {
    const auto [group, dtype] = key;
    const bool trainable = group < static_cast<int>(model_groups_.size());
    const std::string name = fmt::format("{}/{}/{}", unit.name, trainable ? model_groups_[group].name : "frozen",
                                         c10::toString(static_cast<at::ScalarType>(dtype)));
    auto& flat = unit.flats.emplace_back(std::make_unique<FlatShard>(name, members, trainable, shards()));
    if (trainable) flat_group_[flat.get()] = group;
    for (std::size_t i = 0; i < members.size(); ++i)
      place_of_[members[i].second.unsafeGetTensorImpl()] = Place{flat.get(), i};
  }
}

std::vector<FlatShard*> FsdpStrategy::flats() {
  std::vector<FlatShard*> all;
  for (auto& unit : units_)
    for (auto& flat : unit.flats) all.push_back(flat.get());
  for (auto& flat : rest_.flats) all.push_back(flat.get());
  return all;
}

wanfw::StepOutput FsdpStrategy::micro_step(wanfw::Model& model, const wanfw::Batch& batch,
                                           const wanfw::MicroStep& micro) {
  wanfw::StepOutput out;
  // Every micro-batch reduce-scatters: accumulated gradients add up sharded.
  if (micro.phase != phase_) select_phase(micro.phase);
  wanfw::UnitRuntime& units = runtime();
  placement_.count(micro);
  fetcher_->set_gradients_to_host(settings_.host_state && micro.sync_gradients ? &copies_ : nullptr);
  session_->guarded("the forward and backward pass", [&] {
    units.begin_step();  // the rest (parameters in no unit) gathered for the whole micro-step
    out = forward(model, batch, micro);
    backward(out, micro, placement_.loss_scale());  // reduce-scattered as a mean over the shards' ranks
    units.end_step();
    if (micro.sync_gradients) average_over_replicas();
  });
  return out;
}

void FsdpStrategy::select_phase(int phase) {
  phase_ = phase;
  for (FlatShard* flat : flats())
    if (auto it = flat_group_.find(flat); it != flat_group_.end())
      flat->set_reduces_gradients(phase_groups_.empty() ||
                                  phase_groups_.at(static_cast<std::size_t>(phase)).count(it->second));
}

std::vector<wanfw::ParameterGroup> FsdpStrategy::parameter_groups(wanfw::Model&) {
  std::vector<wanfw::ParameterGroup> groups;
  for (std::size_t g = 0; g < model_groups_.size(); ++g) {
    wanfw::ParameterGroup group = model_groups_[g];
    group.parameters.clear();
    for (FlatShard* flat : flats())
      if (auto it = flat_group_.find(flat); it != flat_group_.end() && it->second == static_cast<int>(g))
        group.parameters.emplace_back(flat->name(), flat->shard());
    groups.push_back(std::move(group));
  }
  return groups;
}

void FsdpStrategy::before_optimizer_step(wanfw::Model&) {
  if (settings_.host_state) {  // the optimizer reads the gradients on the host next: every copy over
    for (FlatShard* flat : flats()) flat->move_gradient(copies_);
    copies_.wait();
  }
  if (placement_.groups() == nullptr) return;
  std::vector<at::Tensor> shards;
  for (FlatShard* flat : flats())
    if (flat->trainable()) shards.push_back(flat->shard());
  placement_.settle(shards);
}

double FsdpStrategy::clip_gradients(const std::vector<at::Tensor>& parameters, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : parameters) grads.push_back(p.grad());
  // Every shard once: the job's sum of squares counts each replica group's copy of it.
  const double norm = wanfw::sharded_gradient_norm(grads, *session_) / std::sqrt(settings_.replicate);
  return wanfw::clip_to_norm(grads, norm, max_norm);
}

void FsdpStrategy::after_optimizer_step(wanfw::Model& model, const wanfw::OptimizerStep& step) {
  for (FlatShard* flat : flats()) flat->publish();  // optimizer.state host: the device's copies
  if (step.step != 1 || step.optimizer == nullptr) return;
  // Bytes held between steps, counted from the tensors themselves: the module's parameters (empty
  // while released), the shards, their gradients and the optimizer's state.
  std::int64_t module = 0, shards = 0, gradients = 0, state = 0, host = 0;
  for (const at::Tensor& p : model.module()->parameters()) module += static_cast<std::int64_t>(p.storage().nbytes());
  for (FlatShard* flat : flats()) {
    shards += flat->device_bytes();
    if (flat->shard().grad().defined() && !flat->on_host()) gradients += flat->shard_bytes();
  }
  for (const auto& [key, slot] : step.optimizer->state()) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*slot);
    state += s.exp_avg().nbytes() + s.exp_avg_sq().nbytes();
  }
  if (settings_.host_state) {  // the shards, their gradient slots and the moments all live on the host
    host = static_cast<std::int64_t>(arena_.bytes.nbytes()) + state;
    state = 0;
  }
  wanfw::log::info("fsdp: rank ", rank(), " holds ", shards + module, " bytes of parameters (the model has ",
                   model_bytes_, "), ", gradients, " bytes of gradients and ", state,
                   " bytes of optimizer state on its device",
                   settings_.host_state ? fmt::format(", and {} bytes of training state on the host", host) : "");
}

wanfw::UnitRuntime& FsdpStrategy::runtime() const {
  if (fetcher_ == nullptr || fetcher_->runtime() == nullptr)
    throw wanfw::Error("fsdp: no unit runtime runs the strategy's all-gather fetcher",
                       "the host installs one after setup() with unit_fetcher(); a strategy that wraps fsdp "
                       "forwards unit_fetcher() to it");
  return *fetcher_->runtime();
}

void FsdpStrategy::begin_evaluation(wanfw::Model& model) {
  wanfw::UnitRuntime& units = runtime();
  session_->guarded("gathering the weights for evaluation", [&] { units.hold_all(); });
  sequence_.detach(model);  // whole sequences: the main process alone draws previews
}

void FsdpStrategy::end_evaluation(wanfw::Model& model) {
  sequence_.attach(model);
  runtime().end_hold();
}

}  // namespace wanfw_fsdp
