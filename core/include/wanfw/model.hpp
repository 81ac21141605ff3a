#pragma once
// The model plugin interface: the trainable module and its objective.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "wanfw/data.hpp"
#include "wanfw/parallel/network_groups.hpp"
#include "wanfw/parallel/units.hpp"

namespace wanfw {

class DistributedSession;

/// What one training step of a model yields on one micro-batch.
/// A mean over the samples that have a value (each A14B expert's loss over the samples routed to
/// it): logged as the sum over the logging window's micro-batches and every rank divided by the
/// count, so that it is the same on any layout; a window whose count is 0 logs nothing for it.
struct SampleMean {
  at::Tensor sum;    ///< scalar (detached): the values of this micro-batch's samples that have one
  at::Tensor count;  ///< scalar: how many samples they are
};

struct StepOutput {
  at::Tensor loss;                            ///< scalar, differentiable
  std::map<std::string, at::Tensor> metrics;  ///< scalars to log (detached), besides the loss
  /// Means over samples, by name; every rank and micro-batch gives the same names.
  std::map<std::string, SampleMean> sample_means{};
};

/// Named trainable parameters with their own optimizer settings (LoRA adapters at their own
/// learning rate, a distillation critic, embeddings and norms without weight decay). Unset
/// values take the config's `optimizer` section.
struct ParameterGroup {
  std::string name;
  std::vector<std::pair<std::string, at::Tensor>> parameters;  ///< (checkpoint name, parameter)
  double lr_scale = 1.0;                ///< multiplies the scheduled learning rate
  std::optional<double> weight_decay;   ///< default: optimizer.weight_decay
  std::optional<double> beta1, beta2;   ///< default: optimizer.betas
};

/// One phase of a model that trains its parameter groups in turns (a distillation's generator and
/// its critic): an optimizer step of a phase updates its groups only, on its own learning-rate
/// schedule (counted in the phase's own steps), while the other phases' parameters keep their
/// values and their optimizer state.
struct TrainingPhase {
  std::string name;                 ///< "generator", "critic": its logged loss is "<name>/loss"
  std::vector<std::string> groups;  ///< the names of the parameter groups it trains
  int steps = 1;                    ///< its consecutive optimizer steps in each cycle of the phases
};

/// How `wanfw export` writes a model's weights.
struct ExportSettings {
  std::int64_t max_shard_bytes = 5'000'000'000;  ///< files larger than this are split into shards
  /// Low-rank adapters: false writes the adapters alone, in the layouts adapter loaders read;
  /// true folds them into the weights and writes the full model.
  bool merge_adapters = false;
};

/// A model owns its module(s) and its objective. Parameter names are checkpoint keys, so a
/// model should register the names its ecosystem's checkpoints use.
class Model {
 public:
  virtual ~Model() = default;

  /// The module whose parameters and buffers are trained and checkpointed.
  virtual std::shared_ptr<torch::nn::Module> module() = 0;
  /// The fields every batch must carry (the synthetic data set produces exactly these).
  virtual std::vector<FieldSpec> batch_fields() const = 0;
  /// Forward pass and loss on one micro-batch that already lives on the module's device.
  virtual StepOutput training_step(const Batch& batch) = 0;
  /// The parameters the optimizer updates, in groups with their own optimizer settings. Default:
  /// one group "default" holding every parameter of module() that requires grad. A parameter may
  /// be in one group only; parameters in no group are not trained (nor synchronised by strategies).
  virtual std::vector<ParameterGroup> parameter_groups();
  /// Every parameter of every group, in group order: what the optimizer updates, strategies
  /// synchronise and checkpoints keep optimizer state for.
  std::vector<std::pair<std::string, at::Tensor>> trainable_parameters();
  /// The phases the model trains in, in cycle order: optimizer steps take the phases in turn, each
  /// for its `steps` consecutive steps, round and round from step 1 (so the phase of a step
  /// follows from the step alone, and a resumed run goes on where it stopped). Every group with
  /// parameters belongs to exactly one phase. A phase's step must give gradients to its own
  /// groups' parameters only (run the other parts without autograd); the trainer stops the run
  /// with an error naming the parameter otherwise. Default: none, every step trains every group.
  virtual std::vector<TrainingPhase> phases() { return {}; }
  /// The phase (an index into phases()) the training_step calls that follow compute. Strategies
  /// call it before every training_step (Strategy::forward), on every replica. Default: ignored.
  virtual void set_phase(int phase) {}
  /// The trainable parameters of `phase`'s groups, in group order: what a strategy synchronises
  /// in that phase's steps. A model without phases: every trainable parameter (phase 0).
  std::vector<std::pair<std::string, at::Tensor>> phase_parameters(int phase);
  /// The tensors a checkpoint keeps and a resume restores, under their checkpoint names. Default:
  /// every parameter and buffer of module(). A model whose frozen part is rebuilt from its
  /// configuration (a LoRA base, loaded from the config's weights) returns only what training
  /// changes, so checkpoints stay small.
  virtual std::vector<std::pair<std::string, at::Tensor>> checkpoint_tensors();
  /// Runs the model once, without gradients, on named inputs and returns named outputs
  /// (`wanfw predict`). The default throws: not every model can be evaluated this way.
  virtual std::map<std::string, at::Tensor> predict(const std::map<std::string, at::Tensor>& inputs);
  /// Scores one held-out micro-batch (already on the module's device) without gradients, for
  /// validation every `validation.every` steps; the trainer logs each result as "val/<name>".
  /// The trainer seeds the generators before every validation batch, so random draws repeat
  /// from one validation to the next. Default: the training objective's loss and metrics.
  virtual std::map<std::string, at::Tensor> validation_step(const Batch& batch);
  /// Draws samples (`wanfw sample`) from conditioning `inputs`; `seed` fixes the noise. The
  /// default throws: not every model is generative.
  virtual std::map<std::string, at::Tensor> sample(const std::map<std::string, at::Tensor>& inputs,
                                                   std::uint64_t seed);
  /// sample() whose video comes as it is made: `made` sees each chunk of its latents [B, C, t, h,
  /// w] in order, and the chunks in a row are the returned "latents" (`wanfw sample --video`
  /// writes the frames of each while the next is made). A streaming (causal) model hands over
  /// each chunk when it is final; the default samples whole and hands over the whole video.
  virtual std::map<std::string, at::Tensor> sample_streamed(const std::map<std::string, at::Tensor>& inputs,
                                                            std::uint64_t seed,
                                                            const std::function<void(const at::Tensor&)>& made);
  /// Writes the weights in the model family's release layout (`wanfw export`), so that the
  /// ecosystem's tools load them. The default throws: checkpoints (model.safetensors) are the
  /// generic format.
  virtual void export_weights(const std::filesystem::path& folder, const ExportSettings& settings);
  /// What the model currently generates for the first sample of `batch` (held-out samples on
  /// the module's device), as sample() writes it: a video [1, C, T, h, w] (the Wan models: their
  /// latents). Called on the main process only, without gradients. The host shows it: decoded by
  /// the run's decoder (PluginDescriptor::make_decoder) when the model names one, otherwise as a
  /// strip of its frames (channels 0-2 as RGB, each stretched to its range). Default: undefined
  /// (no preview).
  virtual at::Tensor preview(const Batch& batch, std::uint64_t seed);
  /// An independent copy of this model (same configuration, its own module and weights) on
  /// `device`, for strategies that run replicas side by side (data_parallel). The strategy keeps
  /// the replica's weights equal to this model's. A model that overrides it declares
  /// ModelCapabilities::replicates, and the host builds no replicating layout for one that does
  /// not; the default throws a PluginError.
  virtual std::unique_ptr<Model> replicate(const c10::Device& device);
  /// The model's units (wanfw/parallel/units.hpp): groups of module() parameters used together (a
  /// transformer block each), which the unit runtime fetches together, fsdp by gathering their
  /// shards, block swap by streaming their frozen weights. Under fsdp, parameters in no unit are
  /// gathered for the whole step. Default: none.
  virtual std::vector<Unit> units() { return {}; }
  /// The runner the model passes each unit's forward through (wanfw::run_unit): the unit runtime
  /// fsdp or block swap installs; null takes it away. Models that declare units keep it; the
  /// default ignores it.
  virtual void set_unit_runner(UnitRunner* runner) {}
  /// The device bytes the model's memory plan predicts the caching allocator holds at the peak of a
  /// step (max_memory_reserved); a CUDA run logs it beside the measured peak after its first step.
  /// 0: no plan (the default).
  virtual double planned_device_bytes() const { return 0; }
  /// Sequence parallelism: split each sample's tokens over `group` (a session of the ranks that
  /// share each sample; wanfw/parallel/sequence_parallel.hpp) from now on; null: whole sequences. Returns
  /// false when the model cannot (the default): the strategy then refuses the run. Throws
  /// wanfw::Error when the group does not fit the model (a head count it does not divide).
  virtual bool set_sequence_group(const DistributedSession* group) { return group == nullptr; }
  /// The networks rank groups can hold apart (wanfw/parallel/network_groups.hpp), in order, whether this
  /// process holds all of them or one; empty (the default): the model is one network. Built under
  /// a strategy that places networks (PluginContext::network_groups), a model holds its group's
  /// network alone: module(), parameter groups, units and checkpoint tensors are that network's.
  virtual std::vector<PlaceableNetwork> networks() const { return {}; }
  /// For each sample of `keys` (sample ids, epoch and seed; no fields), the network (an index into
  /// networks()) it trains: a pure function of the keys, called from the data loader's threads.
  /// Default: network 0 for every sample.
  virtual std::vector<int> route(const Batch& keys) const;
};

}  // namespace wanfw
