#pragma once
// The gradient norm of fully sharded training, where each rank holds a piece of every gradient.
// A sharded unit's life cycle (gathered before its forward and backward, released after, its
// gradient reduce-scattered) is the unit runtime's (wanfw/parallel/unit_runtime.hpp) with an all-gathering
// fetcher: the fsdp strategy's.

#include <vector>

#include <ATen/core/Tensor.h>

namespace wanfw {

class DistributedSession;

/// The L2 norm of the whole gradient when every rank holds a piece of it (`gradients`: this
/// rank's shards' gradients; undefined ones count as zero): each tensor's norm in its own dtype,
/// their squares summed in double, summed over the ranks, then the square root — so every rank
/// gets the same norm, and padding (zero) adds nothing. Clipping scales by min(1, max / (norm + 1e-6)).
double sharded_gradient_norm(const std::vector<at::Tensor>& gradients, const DistributedSession& session);

/// Clipping by a norm worked out across ranks (sharded_gradient_norm, NetworkPlacement::gradient_norm):
/// scales `gradients` (undefined ones skipped) by max_norm / (norm + 1e-6) when that is below 1,
/// as torch::nn::utils::clip_grad_norm_ does. Returns `norm`.
double clip_to_norm(const std::vector<at::Tensor>& gradients, double norm, double max_norm);

}  // namespace wanfw
