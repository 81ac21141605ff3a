// The unit life cycle: hooks around each run of a unit's body, the recorded order of use, and the
// two boundary autograd nodes that give the backward hooks.

#include "wanfw/parallel/unit_runtime.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"

namespace wanfw {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Identity on a unit's inputs (and an anchor that requires grad, so the node is in the graph
/// even when no input requires grad): its backward runs once the unit's whole backward has, and is
/// the unit's post-backward hook.
struct UnitEntry : torch::autograd::Function<UnitEntry> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, const at::Tensor& anchor,
                               UnitRuntime* runtime, std::int64_t unit) {
    ctx->saved_data["runtime"] = reinterpret_cast<std::int64_t>(runtime);
    ctx->saved_data["unit"] = unit;
    return variable_list(inputs.begin(), inputs.end());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    reinterpret_cast<UnitRuntime*>(ctx->saved_data["runtime"].toInt())
        ->after_backward(static_cast<std::size_t>(ctx->saved_data["unit"].toInt()));
    grads.resize(grads.size() + 3);  // the anchor, runtime and unit get none
    return grads;
  }
};

/// Identity on a unit's outputs: its backward runs before any of the unit's, and is the unit's
/// pre-backward hook.
struct UnitExit : torch::autograd::Function<UnitExit> {
  static variable_list forward(AutogradContext* ctx, at::TensorList outputs, UnitRuntime* runtime,
                               std::int64_t unit) {
    ctx->saved_data["runtime"] = reinterpret_cast<std::int64_t>(runtime);
    ctx->saved_data["unit"] = unit;
    return variable_list(outputs.begin(), outputs.end());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    reinterpret_cast<UnitRuntime*>(ctx->saved_data["runtime"].toInt())
        ->before_backward(static_cast<std::size_t>(ctx->saved_data["unit"].toInt()));
    grads.resize(grads.size() + 2);
    return grads;
  }
};

}  // namespace

UnitState UnitFetcher::state(std::size_t unit) const {
  return runtime_ != nullptr ? runtime_->state(unit) : UnitState::Released;
}

void UnitFetcher::evicted(std::size_t unit) {
  if (runtime_ != nullptr) runtime_->states_.at(unit) = UnitState::Released;
}

UnitRuntime::UnitRuntime(std::vector<Unit> units, std::shared_ptr<UnitFetcher> fetcher)
    : units_(std::move(units)), fetcher_(std::move(fetcher)), states_(units_.size() + 1, UnitState::Released) {
  if (fetcher_->runtime_ != nullptr)
    throw Error("a unit fetcher was given to a second unit runtime", "make one fetcher for each runtime");
  fetcher_->runtime_ = this;
  // Until a pass is recorded, the units are expected in their declared order.
  for (std::size_t i = 0; i < units_.size(); ++i) recorded_.push_back(i);
}

UnitRuntime::~UnitRuntime() { fetcher_->runtime_ = nullptr; }

std::vector<UnitUse> UnitRuntime::upcoming(const UnitUse& now) const {
  // The pass under way: what it ran so far, then the rest of the recorded pass after `now`.
  std::vector<std::size_t> pass = current_;
  if (!now.backward) {
    const auto at = std::find(recorded_.begin(), recorded_.end(), now.unit);
    if (at != recorded_.end())
      for (auto it = at + 1; it != recorded_.end(); ++it)
        if (std::find(pass.begin(), pass.end(), *it) == pass.end()) pass.push_back(*it);
  }
  std::vector<UnitUse> out;
  if (!now.backward) {
    const auto at = std::find(pass.begin(), pass.end(), now.unit);
    for (auto it = at == pass.end() ? pass.end() : at + 1; it != pass.end(); ++it) out.push_back({*it, false});
    if (differentiated_)
      for (auto it = pass.rbegin(); it != pass.rend(); ++it) out.push_back({*it, true});
  } else {
    // Backward runs the pass in reverse; the next pass then starts as the recorded one did.
    const auto at = std::find(pass.rbegin(), pass.rend(), now.unit);
    for (auto it = at == pass.rend() ? pass.rend() : at + 1; it != pass.rend(); ++it) out.push_back({*it, true});
    for (const std::size_t unit : recorded_) out.push_back({unit, false});
  }
  return out;
}

void UnitRuntime::prefetch_after(const UnitUse& now) {
  if (holding_) return;  // every unit is on the device
  const std::vector<UnitUse> ahead = upcoming(now);
  for (std::size_t i = 0; i < ahead.size(); ++i) {
    const std::size_t unit = ahead[i].unit;
    if (states_[unit] != UnitState::Released) continue;
    // In order of use: a unit that cannot start yet holds back the ones after it.
    if (!fetcher_->prefetch(unit, ahead)) break;
    if (states_[unit] == UnitState::Released) states_[unit] = UnitState::Fetching;
  }
}

void UnitRuntime::acquire(std::size_t unit, const std::vector<UnitUse>& upcoming) {
  if (!holding_) fetcher_->acquire(unit, upcoming);  // held: on the device since hold_all
  states_[unit] = UnitState::InUse;
}

void UnitRuntime::release(std::size_t unit) {
  states_[unit] = UnitState::Ready;
  if (!holding_) fetcher_->release(unit);
}

void UnitRuntime::before_forward(std::size_t unit) {
  // A unit run again, or run after a backward, starts a new pass.
  if (std::find(current_.begin(), current_.end(), unit) != current_.end()) {
    recorded_ = current_;
    current_.clear();
  }
  current_.push_back(unit);
  const UnitUse use{unit, false};
  acquire(unit, upcoming(use));
  if (observer_) observer_(use);
}

void UnitRuntime::after_forward(std::size_t unit) {
  release(unit);
  prefetch_after({unit, false});
}

void UnitRuntime::before_backward(std::size_t unit) {
  const UnitUse use{unit, true};
  acquire(unit, upcoming(use));
  if (observer_) observer_(use);
}

void UnitRuntime::after_backward(std::size_t unit) {
  fetcher_->after_backward(unit);
  release(unit);
  prefetch_after({unit, true});
  // The pass's first unit ends its backward: the next forward starts a new pass.
  if (!current_.empty() && current_.front() == unit) {
    recorded_ = current_;
    current_.clear();
  }
}

void UnitRuntime::begin_step() {
  if (fetcher_->fetches_root() && states_[root()] != UnitState::InUse) acquire(root(), {});
}

void UnitRuntime::end_step() {
  if (states_[root()] == UnitState::InUse) {
    fetcher_->after_backward(root());
    release(root());
  }
  if (!fetcher_->stale_after_step() || holding_) return;
  for (std::size_t unit = 0; unit < units_.size(); ++unit)
    if (states_[unit] == UnitState::Fetching || states_[unit] == UnitState::Ready) release(unit);
}

void UnitRuntime::hold_all() {
  if (holding_) return;
  const std::size_t held = units_.size() + (fetcher_->fetches_root() ? 1 : 0);
  for (std::size_t unit = 0; unit < held; ++unit) {
    if (states_[unit] != UnitState::InUse) {
      fetcher_->acquire(unit, {});
      states_[unit] = UnitState::Ready;
    }
  }
  holding_ = true;
}

void UnitRuntime::end_hold() {
  if (!holding_) return;
  holding_ = false;
  for (std::size_t unit = 0; unit < states_.size(); ++unit)
    if (states_[unit] != UnitState::Released && states_[unit] != UnitState::InUse) release(unit);
}

std::vector<at::Tensor> UnitRuntime::run(std::size_t unit, const std::vector<at::Tensor>& inputs, const Body& body) {
  if (unit >= units_.size())
    throw Error(fmt::format("the model ran unit {}, but declared {} units", unit, units_.size()),
                "the model plugin's units() must list every unit it runs");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined())
      throw Error(fmt::format("unit '{}' was given an undefined input {}", units_[unit].name, i),
                  "pass only defined tensors to wanfw::run_unit; capture optional ones in the body");
  if (current_.empty()) differentiated_ = torch::GradMode::is_enabled();
  before_forward(unit);
  std::vector<at::Tensor> outputs;
  try {
    bool differentiable = fetcher_->trains(unit);
    for (const at::Tensor& input : inputs) differentiable |= input.requires_grad();
    if (!torch::GradMode::is_enabled() || !differentiable) {  // no backward will reach the unit
      outputs = body(inputs);
    } else {
      const at::Tensor anchor = at::empty({0}, inputs.empty() ? at::TensorOptions() : inputs.front().options())
                                    .requires_grad_(true);
      const variable_list entered =
          UnitEntry::apply(at::TensorList(inputs), anchor, this, static_cast<std::int64_t>(unit));
      outputs = UnitExit::apply(at::TensorList(body(entered)), this, static_cast<std::int64_t>(unit));
    }
  } catch (...) {
    states_[unit] = UnitState::Ready;  // fetched, and no longer held
    throw;
  }
  after_forward(unit);
  return outputs;
}

}  // namespace wanfw
