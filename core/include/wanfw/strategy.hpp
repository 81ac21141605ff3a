#pragma once
// The strategy plugin interface: placement and synchronisation.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "wanfw/model.hpp"
#include "wanfw/parallel/network_groups.hpp"
#include "wanfw/precision.hpp"
#include "wanfw/parallel/reduce.hpp"
#include "wanfw/parallel/state_pieces.hpp"

namespace torch::optim {
class Optimizer;
class AdamW;
}

namespace wanfw {

class UnitFetcher;  // wanfw/parallel/unit_runtime.hpp

/// What the core tells a strategy after each optimizer step.
struct OptimizerStep {
  std::int64_t step = 0;      ///< optimizer steps completed, this one included
  bool applied = true;        ///< false when the step was skipped (fp16 overflow)
  /// A checkpoint of the main process's model and optimizer is written right after this call
  /// (periodic, final, or after a stop signal): replicas that drift apart should agree now.
  bool checkpoint_follows = false;
  torch::optim::Optimizer* optimizer = nullptr;  ///< AdamW; its state is keyed by parameter
};

/// Position of a micro-batch inside one optimizer step.
struct MicroStep {
  int index = 0;  ///< 0-based
  int count = 1;  ///< micro-batches per optimizer step
  /// Gradients must be synchronised across replicas after this micro-batch.
  bool sync_gradients = true;
  /// Autocast and loss scaling; null means fp32.
  const Precision* precision = nullptr;
  /// The model's training phase of this step (Model::phases(); 0 for a model without phases):
  /// only Model::phase_parameters(phase) get gradients, so only they are synchronised.
  int phase = 0;
  /// The micro-batch's weight in the step's loss (Batch::weight): backward scales the loss by it.
  double weight = 1.0;
};

/// A strategy decides where the model lives, how a batch is processed, when gradients are
/// reduced, and which process speaks. The core calls, per optimizer step: `micro_step` for every
/// micro-batch, then `before_optimizer_step`, then `all_reduce` once (the step's decisions: stop,
/// NaN guard), then steps the optimizer, then `after_optimizer_step`, then `reduce_metrics`.
/// Every call happens on the training thread, on every rank, in the same order; a strategy with
/// several processes must implement `all_reduce`, `broadcast` and `barrier` as collectives,
/// since the core's decisions (when to stop, to checkpoint, to give up on a NaN) rest on them.
class Strategy {
 public:
  virtual ~Strategy() = default;

  /// One line for the start-up banner ("single device cpu").
  virtual std::string describe() const = 0;
  /// Places (and wraps) the model. Called once, before the optimizer is built.
  virtual void setup(Model& model) = 0;
  /// The device batches are moved to.
  virtual c10::Device device() const = 0;

  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  /// Where this process's samples come from: with sequence parallelism the ranks of a group share
  /// each sample, so the data set is split over the groups (data_world_size = world / group
  /// size), not the ranks. Default: rank() and world_size().
  virtual int data_rank() const { return rank(); }
  virtual int data_world_size() const { return world_size(); }
  /// Only the main process logs, shows progress and writes checkpoints.
  bool is_main() const { return rank() == 0; }
  /// Micro-batches per optimizer step (gradient accumulation).
  virtual int accumulation_steps() const { return 1; }

  /// Forward and backward of one micro-batch (on the CPU as the loader produced it): `forward`
  /// then `backward`. Strategies that act between the two (DDP) override this.
  virtual StepOutput micro_step(Model& model, const Batch& batch, const MicroStep& micro);
  /// Finishes gradient synchronisation before the optimizer reads the gradients.
  virtual void before_optimizer_step(Model& model) {}
  /// After the optimizer stepped (or skipped): strategies that synchronise parameters rather
  /// than gradients (local SGD) act here.
  virtual void after_optimizer_step(Model& model, const OptimizerStep& step) {}
  /// Reduces small values element-wise across every process (each passes as many, in the same
  /// order) and returns the result, the same on every rank. Default: one process, unchanged.
  virtual std::vector<double> all_reduce(std::vector<double> values, Reduce op) { return values; }
  /// The main process's `values` on every rank (each passes as many). Default: unchanged.
  virtual std::vector<double> broadcast(std::vector<double> values) { return values; }
  /// Blocks until every process arrives.
  virtual void barrier() {}
  /// Named scalars averaged over every process (each passes the same names), via all_reduce.
  std::map<std::string, double> reduce_metrics(std::map<std::string, double> metrics);

  // Strategies that shard the training state (fsdp) override the calls below; the defaults suit
  // every strategy that keeps the whole model on each process.

  /// What the optimizer updates, in the model's groups. Called once, after setup. Default: the
  /// model's parameter groups. A sharding strategy returns its shards, grouped as the model's
  /// parameters are.
  virtual std::vector<ParameterGroup> parameter_groups(Model& model) { return model.parameter_groups(); }
  /// The L2 norm of the whole gradient of `parameters` (the optimizer's; those without a gradient
  /// count as zero); when it exceeds `max_norm`, the gradients are scaled to it. Every rank gets
  /// the same norm. Default: torch::nn::utils::clip_grad_norm_ on this process's gradients.
  virtual double clip_gradients(const std::vector<at::Tensor>& parameters, double max_norm);
  /// Validation, previews and histograms read the model's weights outside a training step: a
  /// strategy that keeps them sharded gathers them here (a collective: every rank calls it) and
  /// frees them in end_evaluation.
  virtual void begin_evaluation(Model& model) {}
  virtual void end_evaluation(Model& model) {}
  /// True when the training state (parameters, gradients, optimizer state) is split across the
  /// ranks: every rank then writes its own pieces of a checkpoint (state_pieces) instead of the
  /// main process writing the whole state, and decisions on gradients (fp16 overflow) are agreed.
  /// Declared once, in the plugin's descriptor (StrategyCapabilities::shards_state): the host sets
  /// it when it builds the strategy, a wrapper's from what it or the strategies it wraps declare.
  bool shards_state() const { return shards_state_; }
  /// Called by the host after the factory, never by a plugin (see shards_state).
  void set_shards_state(bool shards) { shards_state_ = shards; }
  /// With networks on rank groups (wanfw/parallel/network_groups.hpp): where this rank sits; null (the
  /// default) when every rank holds the whole model.
  virtual const NetworkGroups* network_groups() const { return nullptr; }
  /// Each rank holds only part of the training state (fsdp's shards, its group's network): every
  /// rank then writes its pieces of a checkpoint (state_pieces) and restores its optimizer state
  /// (load_optimizer_state), and the ranks agree on decisions about gradients (fp16 overflow).
  bool partial_state() const { return shards_state() || network_groups() != nullptr; }
  /// For a strategy that brings the model's units (Model::units) to the device itself (fsdp:
  /// all-gathers each unit's shards), its fetcher, once setup() has run; null for one that keeps
  /// every parameter on its device. The host owns the one unit runtime the model runs its units
  /// through (wanfw/parallel/unit_runtime.hpp) and installs it with this fetcher, or with block swap's.
  virtual std::shared_ptr<UnitFetcher> unit_fetcher() { return nullptr; }
  /// Whether a unit's parameters' gradients are final on this process once the unit's backward
  /// ends (not under ddp, whose buckets are reduced later, nor data_parallel, which sums its
  /// replicas' after backward): what the descriptor declares (StrategyCapabilities::
  /// unit_gradients_final), and for a wrapper what the strategy it wraps answers too. The host sets
  /// it when it builds the strategy.
  bool unit_gradients_final() const { return unit_gradients_final_; }
  /// Called by the host after the factory, never by a plugin (see unit_gradients_final).
  void set_unit_gradients_final(bool final) { unit_gradients_final_ = final; }
  /// This rank's pieces of the model's checkpoint tensors and of the optimizer's state, when
  /// partial_state(). Default: whole tensors, written by the first rank of each network group; a
  /// strategy that shards the state writes its own rows.
  virtual StatePieces state_pieces(Model& model, torch::optim::AdamW& optimizer);
  /// Restores the optimizer's state from a checkpoint written by any layout (`optimizer`'s
  /// parameters are the ones parameter_groups returned). Default: whole tensors, for every
  /// parameter this rank holds; a strategy that shards the state reads its own rows.
  virtual void load_optimizer_state(Model& model, torch::optim::AdamW& optimizer, const TensorRowSource& source);

 protected:
  /// Moves the batch to `device` and runs `model`'s training step there under the precision's
  /// autocast (per thread: replicas on their own threads call it side by side).
  StepOutput forward(Model& model, const Batch& batch, const MicroStep& micro, const c10::Device& device);
  /// forward on device().
  StepOutput forward(Model& model, const Batch& batch, const MicroStep& micro) {
    return forward(model, batch, micro, device());
  }
  /// Backward of the loss x micro.weight x `share` / micro.count, scaled by the fp16 loss scale:
  /// accumulated micro-batches average, a micro-batch weighs its loss by its share of the step, and
  /// a replica holding `share` of a micro-batch by that.
  void backward(const StepOutput& out, const MicroStep& micro, double share = 1.0);

 private:
  bool shards_state_ = false;
  bool unit_gradients_final_ = false;
};

}  // namespace wanfw
