#pragma once
// Internal: precision.mode bf16_weights. The module's trainable parameters hold bf16 values, so
// the forward and backward passes use them with no cast per use and produce bf16 gradients (which
// the strategy reduces in bf16); fp32 master copies are what the optimizer steps, what checkpoints
// save and what a resume restores. After the micro-batches the bf16 gradients become the masters'
// fp32 gradients; after the optimizer step the masters are rounded into the module's parameters.
//
// The module's parameters change dtype once, when this is built, before the strategy places the
// model (a strategy's gradient hooks follow the parameters' dtype from then on); they keep that
// dtype for the run. view() is the model with the masters in place of those parameters: the
// optimizer and checkpoints go through it, so a checkpoint holds fp32 weights and fp32 AdamW state
// under the model's own names, as an fp32 run's does.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "wanfw/model.hpp"

namespace wanfw {

class MasterWeights {
 public:
  /// Every trainable floating-point parameter of `model` (Model::parameter_groups) gets an fp32
  /// master holding its current value, on its device; the parameter itself becomes `compute`
  /// (bf16). Build it where the model will train (the strategy's placement keeps the device).
  MasterWeights(Model& model, at::ScalarType compute);
  ~MasterWeights();

  /// The model as the optimizer and checkpoints see it: parameter_groups() and
  /// checkpoint_tensors() name the masters where the module has a bf16 parameter.
  Model& view();
  /// The module's parameters gradients (bf16) become the masters' (fp32) and are released.
  void take_gradients();
  /// The masters rounded into the module's parameters (after a step, or a restore).
  void publish();
  /// A number every rank computes equal when their masters are equal (to check that the ranks
  /// start from the same weights: a strategy's broadcast covers the module, not the masters).
  double fingerprint() const;
  /// "12 tensors (3.1M parameters)".
  std::string describe() const;

 private:
  struct Pair {
    at::Tensor parameter;  ///< the module's, in the compute dtype
    at::Tensor master;     ///< fp32
  };
  std::vector<Pair> pairs_;
  std::unique_ptr<Model> view_;
};

}  // namespace wanfw
