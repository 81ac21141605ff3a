#pragma once
// Fully sharded training's step for one unit: its parameters live as one flat shard a rank
// (UnitLayout), are gathered whole just before use, and their gradients go back as a
// reduce-scatter, so each rank receives the gradient of its own piece only.
//
//   at::Tensor shard = layout.pack(full, rank, at::kFloat).requires_grad_(true);  // the trained leaf
//   auto params = wanfw::gather_unit(shard, layout, session, at::kBFloat16, at::kFloat);
//   ... forward with params, loss.backward() ...   // shard.grad(): this rank's piece of the mean
//                                                  // over ranks of every rank's gradient

#include <vector>

#include <ATen/core/Tensor.h>

#include "wanfw/shard_layout.hpp"

namespace wanfw {

class DistributedSession;

/// The unit's full tensors, gathered from every rank's flat `shard` and cast to `compute`
/// (layout order), as a differentiable function of `shard`: the backward casts the full tensors'
/// gradients to `reduce`, reduce-scatters them with Reduce::Mean (every rank's loss counts once)
/// and hands this rank its piece in the shard's dtype. `layout.world()` must be the session's.
std::vector<at::Tensor> gather_unit(const at::Tensor& shard, const UnitLayout& layout,
                                    const DistributedSession& session, at::ScalarType compute, at::ScalarType reduce);

/// The L2 norm of the whole gradient when every rank holds a piece of it (`gradients`: this
/// rank's shards' gradients; undefined ones count as zero): each tensor's norm in its own dtype,
/// their squares summed in double, summed over the ranks, then the square root — so every rank
/// gets the same norm, and padding (zero) adds nothing. Clipping scales by min(1, max / (norm + 1e-6)).
double sharded_gradient_norm(const std::vector<at::Tensor>& gradients, const DistributedSession& session);

}  // namespace wanfw
