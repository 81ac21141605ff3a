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

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

namespace wanfw {

class DistributedSession;
class Model;

/// A strategy's sequence-parallel layout (its `sequence_parallel` option): the job's ranks in
/// groups of `size` contiguous ranks, each group sharing its samples, and the data set split over
/// the groups. Size 1: no groups, every rank its own samples.
class SequenceGroups {
 public:
  /// Every rank calls it, with the same size. Throws wanfw::Error when the world does not divide
  /// into groups of `size`; a process alone (no launcher) warns and keeps whole sequences.
  SequenceGroups(const DistributedSession& job, int size);
  ~SequenceGroups();
  int size() const { return size_; }
  int data_rank() const { return rank_ / size_; }
  int data_world_size() const { return world_ / size_; }
  /// This rank's group (null when size is 1).
  const DistributedSession* group() const { return within_.get(); }
  /// Gives `model` the group (Model::set_sequence_group). Throws wanfw::Error when the model
  /// cannot split its sequences.
  void attach(Model& model) const;
  /// Whole sequences again (evaluation: the main process alone draws previews, which no group
  /// could share). attach() splits them again.
  void detach(Model& model) const;
  /// ", sequence parallel 2 (2 groups)", or "" for size 1.
  std::string describe() const;

 private:
  int size_, rank_, world_;
  std::unique_ptr<DistributedSession> within_, across_;
};

/// Where a sample's L tokens lie across a sequence-parallel group of p ranks: padded with zero
/// tokens to L' = p·ceil(L / p), rank r holds tokens [r·L'/p, (r+1)·L'/p). A model splits its token
/// sequence after embedding it (split), runs its blocks on its share — self-attention through
/// sequence_to_heads / heads_to_sequence, masking the padding (key_mask) — and gathers the
/// outputs back (gather) before its loss, which every rank of the group then computes alike.
///
/// The gradients: split's is the slice's (zeros for the other ranks' tokens); gather's sums the
/// group's gradients of each rank's tokens (a reduce-scatter), since each rank's loss reads every
/// token. So with the gradients averaged over all ranks (ddp, fsdp), a group counts its samples
/// once, as one rank with the whole sample does.
class SequenceSplit {
 public:
  /// `tokens` (L) split over `group` (every rank of the group passes the same L).
  SequenceSplit(const DistributedSession& group, std::int64_t tokens);

  std::int64_t tokens() const { return tokens_; }    ///< L
  std::int64_t padded() const { return padded_; }    ///< L'
  std::int64_t local() const { return padded_ / size_; }  ///< L' / p
  std::int64_t begin() const { return rank_ * local(); }  ///< this rank's first token
  const DistributedSession& group() const { return *group_; }

  /// This rank's tokens of `x` [B, L, ...] (dim 1): [B, L'/p, ...], zero past L. Differentiable.
  at::Tensor split(const at::Tensor& x) const;
  /// Every rank's tokens [B, L'/p, ...] -> [B, L, ...], the padding dropped. Differentiable: the
  /// backward reduce-scatters (sums) the incoming gradient over the group.
  at::Tensor gather(const at::Tensor& x) const;
  /// For attention over all L' tokens: a [L'] bool mask, true at real tokens; undefined when
  /// nothing is padded (L' = L).
  at::Tensor key_mask(const c10::Device& device) const;

 private:
  const DistributedSession* group_;
  std::int64_t tokens_, padded_;
  int rank_, size_;
};

/// [B, L/p, H, D] (this rank's tokens, every head) -> [B, L, H/p, D] (every token, this rank's
/// heads: [r·H/p, (r+1)·H/p)). Throws wanfw::Error when H is not divisible by p, naming both.
at::Tensor sequence_to_heads(const at::Tensor& x, const DistributedSession& session);

/// [B, L, H/p, D] -> [B, L/p, H, D]: the inverse of sequence_to_heads. Throws wanfw::Error when L
/// is not divisible by p (pad the sequence to a multiple of p first).
at::Tensor heads_to_sequence(const at::Tensor& x, const DistributedSession& session);

}  // namespace wanfw
