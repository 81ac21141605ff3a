#pragma once
// Strategy `fsdp` (ZeRO-3): every parameter, gradient and AdamW moment is sharded across the
// ranks; each rank keeps 1/N of them between uses. A model's units (wanfw::Unit) run through
// the host's wanfw::UnitRuntime with this strategy's AllGatherFetcher (Strategy::unit_fetcher): gathered just before
// their forward and again before their backward (the next one's gather started ahead), and their gradients
// reduce-scattered as backward leaves them; the parameters in no unit
// are gathered for the whole step. The optimizer steps this rank's shards; clipping uses the norm
// of the whole gradient; checkpoints are written in pieces, a piece a rank (wanfw/parallel/state_pieces.hpp).
// A model that trains in phases reduces, in each step, the flats of that phase's groups only.
// With network_groups, each network is sharded over its own group of ranks (wanfw/parallel/network_groups.hpp).
// With replicate R (hybrid sharding), the ranks (of each network's group) split into R replica groups
// of contiguous ranks, each sharding the whole state over its ranks (a node's, on NVLink): gathers
// and reduce-scatters stay within a group, and once a step each rank's reduced shard is averaged
// with the same shard of the other groups (the one collective across nodes). Every group then
// holds the same state; the first writes the checkpoints, which any layout reads.
// With optimizer.state host (ZeRO-Offload with sharding), the trainable shards live in one host arena
// with their gradients, and so the optimizer's moments and averages: the device keeps a copy of the
// shards in the gathers' dtype; in the step's last micro-batch each unit's reduced gradients go to
// the host as its backward ends; the optimizer steps on the host's cores; the copies are refreshed
// after the step.

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "all_gather_fetcher.hpp"
#include "unit_shards.hpp"
#include "wanfw/parallel/distributed.hpp"
#include "wanfw/parallel/host_arena.hpp"
#include "wanfw/parallel/sequence_parallel.hpp"
#include "wanfw/strategy.hpp"

namespace wanfw_fsdp {

struct FsdpSettings {
  RunnerSettings runner;
  int sequence_parallel = 1;
  std::vector<int> network_groups;
  bool host_state = false;  ///< optimizer.state host (PluginContext::host_optimizer_state)
  int replicate = 1;        ///< replica groups (hybrid sharding); 1: one group, every rank
};

/// replicate: `holders` (the job, or a network's group: `network_groups`) in settings.replicate groups
/// of contiguous ranks (within) and the ranks at each place of every group (across); none for 1.
/// Throws wanfw::Error naming strategy.replicate when the ranks cannot form them.
wanfw::SessionGroups replica_groups(const wanfw::DistributedSession& holders, const FsdpSettings& settings,
                                    bool network_groups);

class FsdpStrategy final : public wanfw::Strategy {
 public:
  FsdpStrategy(FsdpSettings settings, std::unique_ptr<wanfw::DistributedSession> session);
  ~FsdpStrategy() override;

  std::string describe() const override;
  void setup(wanfw::Model& model) override;
  c10::Device device() const override { return session_->device(); }
  int rank() const override { return session_->rank(); }
  int world_size() const override { return session_->world_size(); }
  int data_rank() const override { return sequence_.data_rank(); }
  int data_world_size() const override { return sequence_.data_world_size(); }
  const wanfw::NetworkGroups* network_groups() const override { return placement_.groups(); }
  /// A network group without samples this step: its gradients dropped, as on one device.
  void before_optimizer_step(wanfw::Model& model) override;
  wanfw::StepOutput micro_step(wanfw::Model& model, const wanfw::Batch& batch, const wanfw::MicroStep& micro) override;
  std::vector<double> all_reduce(std::vector<double> values, wanfw::Reduce op) override {
    return session_->all_reduce(std::move(values), op);
  }
  std::vector<double> broadcast(std::vector<double> values) override { return session_->broadcast(std::move(values)); }
  void barrier() override { session_->barrier(); }
  /// After the first step: what this rank holds (its log line; WANFW_LOG_ALL_RANKS=1 shows every rank's).
  void after_optimizer_step(wanfw::Model& model, const wanfw::OptimizerStep& step) override;

  std::vector<wanfw::ParameterGroup> parameter_groups(wanfw::Model& model) override;
  double clip_gradients(const std::vector<at::Tensor>& parameters, double max_norm) override;
  void begin_evaluation(wanfw::Model& model) override;
  void end_evaluation(wanfw::Model& model) override;
  /// The all-gather fetcher the host's unit runtime runs the model's units through.
  std::shared_ptr<wanfw::UnitFetcher> unit_fetcher() override { return fetcher_; }
  wanfw::StatePieces state_pieces(wanfw::Model& model, torch::optim::AdamW& optimizer) override;
  void load_optimizer_state(wanfw::Model& model, torch::optim::AdamW& optimizer,
                            const wanfw::TensorRowSource& source) override;

 private:
  /// Where a module parameter lives: its flat shard and its place in the flat's layout.
  struct Place {
    FlatShard* flat = nullptr;
    std::size_t index = 0;
  };
  /// The model's units and the rest, each cut into flat shards by optimizer group and dtype.
  void build_units(wanfw::Model& model);
  /// The flat shards of `unit`'s parameters (module order), keyed by group (or frozen) and dtype.
  void cut_unit(UnitShards& unit, const std::vector<std::pair<std::string, at::Tensor>>& parameters);
  /// optimizer.state host: the trainable flats' shards and their gradient slots into one host arena.
  void place_state_on_host();
  /// A step of training phase `phase` follows: only the flats of its groups reduce gradients.
  void select_phase(int phase);
  /// Every flat shard, units first, the rest last.
  std::vector<FlatShard*> flats();
  /// The host's unit runtime that runs fetcher_ (begin_step, hold_all): throws when none does.
  wanfw::UnitRuntime& runtime() const;

  /// replicate: every trainable shard's reduced gradient averaged with the other replica groups'.
  void average_over_replicas();

  FsdpSettings settings_;
  /// The ranks that hold the model (its network's group, or the job) and, within them, those its
  /// state is sharded over: all of them, or with replicate this rank's replica group.
  const wanfw::DistributedSession& holders() const { return placement_.group() ? *placement_.group() : *session_; }
  const wanfw::DistributedSession& shards() const { return replicas_.within ? *replicas_.within : holders(); }

  std::unique_ptr<wanfw::DistributedSession> session_;
  wanfw::NetworkPlacement placement_;  ///< network groups (none by default)
  wanfw::SequenceGroups sequence_;     ///< sequence parallelism: the ranks sharing each sample
  wanfw::SessionGroups replicas_;      ///< replicate: this rank's replica group (within), its shard's copies (across)
  std::vector<UnitShards> units_;
  UnitShards rest_;
  std::shared_ptr<AllGatherFetcher> fetcher_;
  std::vector<wanfw::ParameterGroup> model_groups_;
  std::map<const void*, int> group_of_;         ///< parameter -> its group's index (trainable ones)
  std::vector<std::set<int>> phase_groups_;     ///< per training phase, its groups' indices (none: no phases)
  int phase_ = -1;                              ///< the phase the flats reduce for (-1: none chosen yet)
  std::map<const void*, Place> place_of_;       ///< parameter -> where it lives
  std::map<const FlatShard*, int> flat_group_;  ///< trainable flat -> its group's index
  std::int64_t model_bytes_ = 0;                ///< every parameter's bytes, whole (padding excluded)
  wanfw::HostArena arena_;                      ///< optimizer.state host: the trainable shards and their gradients
  wanfw::HostCopies copies_;                    ///< optimizer.state host: the gradients' moves there
};

}  // namespace wanfw_fsdp
