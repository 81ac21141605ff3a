#pragma once
// One flat shard of fully sharded training: the parameters of one unit that share an optimizer
// group (or are frozen) and a dtype, laid out by wanfw::UnitLayout. This rank keeps only its
// shard (the optimizer's leaf, in the parameters' own dtype: the master weights); the module's
// parameter tensors hold their whole values only while gathered, as views of one buffer whose
// memory is released between uses and refilled in place (so tensors that autograd saved from a
// gathered parameter read the right values again when the parameters are gathered for backward).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "wanfw/parallel/distributed.hpp"
#include "wanfw/parallel/host_arena.hpp"
#include "wanfw/parallel/shard_layout.hpp"

namespace wanfw_fsdp {

class FlatShard {
 public:
  /// Where the flat's whole values are: released (only this rank's shard), gathering (an all-gather
  /// in flight) or gathered (the module's parameters hold them).
  enum class State { Released, Gathering, Gathered };

  /// `members`: (name, the module's parameter tensor holding its full value now), all of one
  /// dtype. Takes this rank's shard of them; the parameters keep their values until release().
  FlatShard(std::string name, std::vector<std::pair<std::string, at::Tensor>> members, bool trainable,
            const wanfw::DistributedSession& session);

  const std::string& name() const { return name_; }
  bool trainable() const { return trainable_; }
  const wanfw::UnitLayout& layout() const { return layout_; }
  /// This rank's shard: the optimizer's parameter (requires grad when trainable).
  const at::Tensor& shard() const { return shard_; }
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  const std::vector<std::string>& names() const { return names_; }
  State state() const { return state_; }
  /// Whether this step reduces the flat's gradients: false in a step of a training phase that
  /// does not train it (wanfw::TrainingPhase), whose shard then gets no gradient at all.
  bool reduces_gradients() const { return reduces_gradients_; }
  void set_reduces_gradients(bool reduced) { reduces_gradients_ = reduced; }

  /// Starts gathering the full parameters in `compute` dtype (none: the shard's own; the transfer
  /// may run while the caller computes); finish_gather completes it. Both do nothing when the
  /// parameters are gathered.
  void start_gather(std::optional<at::ScalarType> compute);
  /// Completes the gather: the module's parameters hold their full values.
  void finish_gather();
  /// The module's parameters become empty and the gathered memory is returned.
  void release();
  /// Reduce-scatters the full gradients of parameters() (undefined: zero) in `reduce` dtype, mean
  /// over the ranks: this rank's piece of the gradient, in the shard's dtype.
  at::Tensor reduce_gradient(const std::vector<at::Tensor>& gradients, at::ScalarType reduce) const;
  /// Bytes this rank keeps between steps: the shard (padding included).
  std::int64_t shard_bytes() const;

  // optimizer.state host (FsdpSettings::host_state): the trainable flats' shards live in host memory.

  /// The shard moves into `master`, a tensor over the strategy's host arena in the shard's dtype,
  /// with `gradient` its gradient's slot there; the device keeps a copy in `device_dtype` (what
  /// gathers send: their dtype) and accumulates the reduced gradients until move_gradient.
  void keep_on_host(at::Tensor master, at::Tensor gradient, at::ScalarType device_dtype);
  bool on_host() const { return device_copy_.defined(); }
  /// Adds this rank's reduced gradient `piece` to the shard's (on the host: to the device's
  /// accumulator, moved there at once with `to_host` when given).
  void add_gradient(const at::Tensor& piece, wanfw::HostCopies* to_host);
  /// On the host: the gradient accumulated on the device goes into the host slot (by `copies`: the
  /// caller waits for them before the host reads it) and becomes the shard's.
  void move_gradient(wanfw::HostCopies& copies);
  /// On the host: the shard's values into the device's copy (after a step; from pinned memory the
  /// copy is queued, and the device's work that reads the copy follows it).
  void publish();
  /// Bytes this rank keeps on the device between steps: the shard, or its device copy.
  std::int64_t device_bytes() const;

 private:
  std::string name_;
  bool trainable_;
  bool reduces_gradients_ = true;
  const wanfw::DistributedSession& session_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> parameters_;  ///< the module's tensors, whose data this class points
  wanfw::UnitLayout layout_;
  at::Tensor shard_;
  /// On the host: the device's copy of shard_ (gathers send it), the reduced gradient accumulated
  /// on the device, and shard_'s gradient slot in the host arena. Undefined otherwise.
  at::Tensor device_copy_, device_gradient_, host_gradient_;
  /// The tensor on the device gathers send: device_copy_ on the host, else shard_.
  const at::Tensor& local() const { return on_host() ? device_copy_ : shard_; }
  at::Tensor full_;                    ///< every parameter's full value, back to back (its storage freed between uses)
  std::vector<at::Tensor> views_;      ///< the parameters' views of full_
  at::Tensor gathered_buffer_, sent_;  ///< the all-gather's output and input while one is in flight
  wanfw::DistributedSession::PendingGather pending_;
  State state_ = State::Gathered;
};

}  // namespace wanfw_fsdp
