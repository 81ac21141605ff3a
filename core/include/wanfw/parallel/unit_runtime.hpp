#pragma once
// The life cycle of a model's units (wanfw/parallel/units.hpp) as one mechanism. A unit's
// parameters are fetched to the device before its forward and again before its backward, and
// released after each; fetches of the units used next start ahead, in the order of use the
// runtime recorded. How a unit is fetched is its UnitFetcher's business: fsdp all-gathers its
// shards (and reduce-scatters its gradients after its backward), block swap copies its frozen
// weights from host memory into a ring of device slots.
//
// The hooks, around every run of a unit's body:
//   pre-forward:  fetch (unless under way) and wait      post-forward:  release, prefetch
//   pre-backward: fetch (unless under way) and wait      post-backward: release, prefetch
// The backward hooks come from two identity autograd nodes around the body (one on its inputs, one
// on its outputs), so a body that checkpoints its activations recomputes between them.
//
// The runtime alone keeps a unit's life cycle (UnitState): Released (not on the device), Fetching
// (a copy or gather under way), Ready (on the device, no compute holding it), InUse (a hook holds
// it). A fetcher keeps only its mechanism's state (block swap its slots, fsdp its gather buffers),
// reads the runtime's record when it chooses, and says when a unit's parameters leave the device
// (UnitFetcher::evicted).
//
// The parameters in no unit (the root: embeddings, head) are the fetcher's too when it says so
// (fsdp): the runtime holds them as one more unit, index units().size(), for a whole micro-step
// (begin_step .. end_step), as FSDP2 holds its root group between forward and backward.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wanfw/parallel/units.hpp"

namespace wanfw {

enum class UnitState { Released, Fetching, Ready, InUse };

/// One use of a unit: its index and whether it is its backward.
struct UnitUse {
  std::size_t unit = 0;
  bool backward = false;
  bool operator==(const UnitUse&) const = default;
};

class UnitRuntime;

/// Brings units' parameters to the device and lets them go. Calls come from the runtime, on the
/// thread that runs the model (forward) or the autograd engine's (backward), never concurrently.
class UnitFetcher {
 public:
  virtual ~UnitFetcher() = default;
  /// Starts fetching `unit` if it can start now (block swap: a slot is free, or holds a unit whose
  /// next use comes after `unit`'s); returns whether it started, or there was nothing to fetch.
  /// `upcoming`: the uses expected after now, nearest first (`unit`'s among them).
  virtual bool prefetch(std::size_t unit, const std::vector<UnitUse>& upcoming) = 0;
  /// Makes `unit` ready for the compute (fetching it now if no fetch is under way) and makes the
  /// compute wait for it. `upcoming`: the uses expected after this one.
  virtual void acquire(std::size_t unit, const std::vector<UnitUse>& upcoming) = 0;
  /// The compute queued so far is the last to read `unit` until its next acquire. A fetcher that
  /// frees the unit's parameters now says so (evicted); one that keeps them (block swap, until the
  /// slot is wanted) leaves the unit Ready.
  virtual void release(std::size_t unit) = 0;
  /// The unit's backward is over: its parameters' gradients are whole (fsdp reduce-scatters them).
  /// Called before release.
  virtual void after_backward(std::size_t unit) {}
  /// Whether some parameter of `unit` trains: a unit that trains nothing and whose inputs need no
  /// gradient runs without the backward hooks (no backward reaches it).
  virtual bool trains(std::size_t unit) const { return true; }
  /// Whether fetching is a collective (UnitRunner::collective).
  virtual bool collective() const { return false; }
  /// Whether the parameters in no unit are fetched too: the runtime then holds them as unit
  /// units().size() from begin_step to end_step (fsdp gathers them; block swap streams declared
  /// units only).
  virtual bool fetches_root() const { return false; }
  /// Whether a fetched copy goes stale when the optimizer steps (fsdp: the shards it was gathered
  /// from change), so that end_step lets go of every unit still fetched (a prefetch for the next
  /// step). Block swap's frozen weights never go stale: its slots stay filled across steps.
  virtual bool stale_after_step() const { return false; }

  /// The runtime that runs units through this fetcher; null until one is made with it.
  UnitRuntime* runtime() const { return runtime_; }

 protected:
  /// The runtime's record of `unit`'s life cycle, for the fetcher's choices (Released when no
  /// runtime runs it).
  UnitState state(std::size_t unit) const;
  /// `unit`'s parameters left the device (fsdp freed its gather, block swap gave its slot to
  /// another unit): Released in the runtime's record.
  void evicted(std::size_t unit);

 private:
  friend class UnitRuntime;
  UnitRuntime* runtime_ = nullptr;
};

/// Runs a model's units through a fetcher (Model::set_unit_runner takes it).
class UnitRuntime final : public UnitRunner {
 public:
  /// Throws wanfw::Error when `fetcher` already serves another runtime.
  UnitRuntime(std::vector<Unit> units, std::shared_ptr<UnitFetcher> fetcher);
  ~UnitRuntime() override;

  std::vector<at::Tensor> run(std::size_t unit, const std::vector<at::Tensor>& inputs, const Body& body) override;
  bool collective() const override { return fetcher_->collective(); }

  const std::vector<Unit>& units() const { return units_; }
  /// `unit`'s life cycle; units().size() is the root (the parameters in no unit).
  UnitState state(std::size_t unit) const { return states_.at(unit); }

  /// A micro-step begins: the root, when the fetcher fetches it, is acquired and held until end_step.
  /// Called by the strategy around its forward and backward (fsdp, inside its collective guard).
  void begin_step();
  /// The micro-step's backward is over: the root's gradients are whole (after_backward) and it is
  /// released; a fetcher whose copies go stale when the optimizer steps lets go of every unit still
  /// fetched.
  void end_step();
  /// Every unit, and the root, acquired and held until end_hold: the main process alone may then run
  /// the model (previews, validation) without a collective.
  void hold_all();
  void end_hold();

  /// Observes every use just before the body runs (or its backward), with the unit held: tests
  /// check what the compute sees. Null: none.
  using Observer = std::function<void(const UnitUse&)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }

  // For the boundary autograd nodes (unit_runtime.cpp).
  void before_backward(std::size_t unit);
  void after_backward(std::size_t unit);

 private:
  friend class UnitFetcher;
  void before_forward(std::size_t unit);
  void after_forward(std::size_t unit);
  void acquire(std::size_t unit, const std::vector<UnitUse>& upcoming);
  /// Ready, then the fetcher's release (which may evict it); nothing while every unit is held.
  void release(std::size_t unit);
  /// The uses expected after `now` (from the recorded order), nearest first.
  std::vector<UnitUse> upcoming(const UnitUse& now) const;
  void prefetch_after(const UnitUse& now);
  std::size_t root() const { return units_.size(); }

  std::vector<Unit> units_;
  std::shared_ptr<UnitFetcher> fetcher_;
  std::vector<UnitState> states_;      ///< every unit's, then the root's
  std::vector<std::size_t> recorded_;  ///< the last complete forward pass
  std::vector<std::size_t> current_;   ///< the forward pass under way
  bool differentiated_ = false;        ///< whether the pass under way will run backward
  bool holding_ = false;               ///< hold_all .. end_hold
  Observer observer_;
};

/// Which of `count` units block swap streams from host memory when asked for `streamed` of them:
/// spread evenly between resident ones so that copies hide behind their compute,
/// floor((2k + 1) count / (2 streamed)) for k < streamed. The runtime streams these, and a model's
/// memory plan counts these (libs/wan_dit/memory): one choice for both.
std::vector<std::size_t> streamed_units(std::size_t count, std::size_t streamed);

}  // namespace wanfw
