#pragma once
// Internal: fp32 master weights beside the module's parameters, for precision.mode bf16_weights
// and for optimizer.state host.
//
// bf16_weights: the module's trainable parameters hold bf16 values, so the forward and backward
// passes use them with no cast per use and produce bf16 gradients (which the strategy reduces in
// bf16); fp32 masters are what the optimizer steps, what checkpoints save and what a resume
// restores. optimizer.state host: the masters (and so the optimizer's moments and averages, which
// it makes beside them) live in host memory: one arena, pinned when the run is on a GPU, holds each
// master and a float32 slot for its gradient. Either way, after the micro-batches the module's
// gradients become the masters' (take_gradients) and after the optimizer step the masters are
// written into the module's parameters (publish).
//
// The module's parameters change dtype once, when this is built, before the strategy places the
// model (a strategy's gradient hooks follow the parameters' dtype from then on); they keep that
// dtype for the run. view() is the model with the masters in place of those parameters: the
// optimizer and checkpoints go through it, so a checkpoint holds fp32 weights and fp32 AdamW state
// under the model's own names, as an fp32 run's does, wherever the masters lived.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include "config/core_sections.hpp"
#include "wanfw/parallel/host_arena.hpp"
#include "wanfw/model.hpp"

namespace torch::autograd {
struct Node;
}

namespace wanfw {

/// The host bytes optimizer.state host takes for `model`'s trainable parameters in one process:
/// the arena (each fp32 master and its gradient slot) and, beside it, AdamW's two moments and the
/// averages of the groups `ema` averages.
double host_state_bytes(Model& model, const EmaSettings& ema);

class MasterWeights {
 public:
  /// Every trainable floating-point parameter of `model` (Model::parameter_groups) gets an fp32
  /// master holding its current value; the parameter itself becomes `compute` (none: each keeps its
  /// dtype). `home` Device: each master on its parameter's device (build it where the model
  /// will train: the strategy's placement keeps the device). Host: in one host arena, pinned when
  /// `device` (the run's) is a GPU and pinning works.
  MasterWeights(Model& model, std::optional<at::ScalarType> compute, OptimizerStateHome home, c10::Device device);
  ~MasterWeights();

  /// The model as the optimizer and checkpoints see it: parameter_groups() and
  /// checkpoint_tensors() name the masters in place of the parameters they shadow.
  Model& view();
  /// The module's parameters' gradients become the masters' (fp32; in the arena's slots when the
  /// masters live on the host) and are released; those moved while backward ran are waited for.
  /// Ends the streaming stream_micro_batch armed.
  void take_gradients();
  /// The masters written into the module's parameters, rounded to their dtype (after a step, or a
  /// restore).
  void publish();
  /// Where the masters live.
  OptimizerStateHome home() const { return home_; }
  /// Host: from now on, in the micro-batches stream_micro_batch arms, each parameter's gradient
  /// moves to the host as soon as backward has accumulated it (a hook after its gradient
  /// accumulator, as a ddp reducer watches them): the device then holds the gradients being
  /// computed, not the model's. Call it once the strategy has placed the model.
  void stream_gradients();
  /// Block swap streams some of the trained parameters from host memory (BlockSwapSettings::
  /// trained): `home_of(parameter)` is where one's compute copy lives between uses (undefined: the
  /// parameter itself), and `before_writing` lets go of every device copy of them; publish then
  /// writes those masters into their homes. Call it once block swap holds them.
  void keep_streamed(const std::function<at::Tensor(const at::Tensor&)>& home_of, std::function<void()> before_writing);
  /// Whether the next micro-batch's gradients move as each is whole: for the step's last
  /// micro-batch, when the strategy changes no gradient after backward
  /// (Strategy::unit_gradients_final); earlier micro-batches accumulate on the device.
  void stream_micro_batch(bool on) { streaming_->on = on && !accumulators_.empty(); }
  /// Whether `parameter` (the module's) got a gradient this step: on the device, or moved to its
  /// master already.
  bool has_gradient(const at::Tensor& parameter) const;
  /// A number every rank computes equal when their masters are equal (to check that the ranks
  /// start from the same weights: a strategy's broadcast covers the module, not the masters).
  double fingerprint() const;
  /// "12 tensors (3.1M parameters) in bf16 for compute, their fp32 masters on the device" (or where
  /// in host memory, and when their gradients move there).
  /// `gradients_final`: the strategy changes no gradient after backward (Strategy::
  /// unit_gradients_final), so that they move while backward runs.
  std::string describe(bool gradients_final = true) const;

 private:
  struct Pair {
    at::Tensor parameter;  ///< the module's, in the compute dtype
    at::Tensor master;     ///< fp32
    at::Tensor gradient;   ///< the master's gradient slot in the host arena (home Host), else undefined
    at::Tensor home;       ///< block swap's host copy of a streamed parameter (keep_streamed), else undefined
  };
  /// Host: one arena cut into each master and its gradient slot.
  void place_on_host(c10::Device device);
  /// The parameter's gradient accumulator, made for its whole shape (a placeholder's too).
  static c10::intrusive_ptr<torch::autograd::Node> accumulator_of(Pair& pair);
  /// Pair `i`'s gradient to its master's slot, released on the device.
  void move_gradient(Pair& pair);

  OptimizerStateHome home_;
  std::vector<Pair> pairs_;
  HostArena arena_;  ///< home Host
  std::vector<c10::intrusive_ptr<torch::autograd::Node>> accumulators_;  ///< stream_gradients: kept alive
  /// stream_micro_batch's switch, shared with the hooks, which outlive this object (a gradient
  /// accumulator lives while a graph holds it): the destructor lets them go.
  struct Streaming {
    bool on = false;
    MasterWeights* owner = nullptr;
  };
  std::shared_ptr<Streaming> streaming_ = std::make_shared<Streaming>();
  std::unordered_map<const void*, std::size_t> index_;  ///< a module parameter -> its pair
  HostCopies copies_;  ///< the gradients' moves to the host (a copy stream of their own on a GPU)
  std::function<void()> before_writing_homes_;  ///< keep_streamed
  std::unique_ptr<Model> view_;
};

}  // namespace wanfw
