#pragma once
// Ulysses sequence parallelism: a group of p ranks shares one sample, each holding a contiguous
// range of its tokens (rank r: tokens [r·L/p, (r+1)·L/p)). Around self-attention two
// all-to-alls trade the split: before it, every rank gives up all but its share of the heads and
// receives every token of those heads; after it, the reverse. Attention then runs on whole
// sequences of H/p heads, so nothing changes the math.
//
//   q = wanfw::sequence_to_heads(q, session);       // [B, L/p, H, D] -> [B, L, H/p, D]
//   ... attention over all L tokens, H/p heads ...
//   out = wanfw::heads_to_sequence(out, session);   // [B, L, H/p, D] -> [B, L/p, H, D]
//
// Both are differentiable; the gradient of each is the other applied to the incoming gradient.
// Every rank of the group calls them in the same order with the same shapes.

#include <ATen/core/Tensor.h>

namespace wanfw {

class DistributedSession;

/// [B, L/p, H, D] (this rank's tokens, every head) -> [B, L, H/p, D] (every token, this rank's
/// heads: [r·H/p, (r+1)·H/p)). Throws wanfw::Error when H is not divisible by p, naming both.
at::Tensor sequence_to_heads(const at::Tensor& x, const DistributedSession& session);

/// [B, L, H/p, D] -> [B, L/p, H, D]: the inverse of sequence_to_heads. Throws wanfw::Error when L
/// is not divisible by p (pad the sequence to a multiple of p first).
at::Tensor heads_to_sequence(const at::Tensor& x, const DistributedSession& session);

}  // namespace wanfw
