// The trainer's collective decisions: what every rank agrees on after a step (a stop signal, a
// loss or gradient norm that is not finite), the stop that follows a non-finite value, the ranks'
// agreement on their master weights at the start, and on a checkpoint's averages.

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "host/stop_signal.hpp"
#include "train/master_weights.hpp"
#include "train/trainer.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parameter_averages.hpp"

namespace wanfw {

Trainer::Decision Trainer::agree(double loss, double grad_norm, bool overflow, bool stray) {
  const int world = strategy_->world_size(), rank = strategy_->rank();
  const bool guard = settings_.trainer.nan_guard;
  // Max over ranks of (world - rank) for each fault names the lowest rank that has it.
  auto fault = [&](bool bad) { return bad ? static_cast<double>(world - rank) : 0.0; };
  const std::vector<double> agreed = strategy_->all_reduce(
      {static_cast<double>(StopSignal::received()), fault(guard && !std::isfinite(loss)),
       fault(guard && !overflow && !std::isfinite(grad_norm)), fault(stray)},
      Reduce::Max);
  Decision decision;
  decision.signal = static_cast<int>(agreed[0]);
  if (agreed[3] > 0) decision.stray_rank = world - static_cast<int>(agreed[3]);
  if (agreed[1] > 0) {
    decision.nonfinite_rank = world - static_cast<int>(agreed[1]);
    decision.metric = "loss";
  } else if (agreed[2] > 0) {
    decision.nonfinite_rank = world - static_cast<int>(agreed[2]);
    decision.metric = "grad_norm";
  }
  return decision;
}

void Trainer::stop_on_nonfinite(const Decision& decision, double loss, double grad_norm) const {
  const bool here = decision.nonfinite_rank == strategy_->rank();
  const double value = decision.metric == "loss" ? loss : grad_norm;
  const std::string what = strategy_->world_size() == 1 ? fmt::format("is {}", value)
                           : here ? fmt::format("is {} on rank {}", value, decision.nonfinite_rank)
                                  : fmt::format("is not finite on rank {}", decision.nonfinite_rank);
  const std::string checkpoint =
      !last_checkpoint_ ? std::string("no checkpoint had been written yet")
      : last_checkpoint_ == resumed_from_
          ? fmt::format("the run resumed from {} (its values checked) and wrote no checkpoint since",
                        last_checkpoint_->string())
          : fmt::format("the last checkpoint, {}, is intact", last_checkpoint_->string());
  throw NonFiniteError(
      fmt::format("step {}: metric '{}' {} (NaN guard); {} stopped before the optimizer applied it, and {}",
                  state_.step + 1, decision.metric, what, strategy_->world_size() == 1 ? "training" : "every rank",
                  checkpoint),
      "lower optimizer.lr, enable trainer.grad_clip, or check the data; then resume with --resume auto");
}

std::string Trainer::stray_gradient(int phase) const {
  if (outside_phase_.empty()) return {};
  for (const auto& [name, tensor] : outside_phase_.at(static_cast<std::size_t>(phase)))
    if (masters_ != nullptr ? masters_->has_gradient(tensor) : tensor.grad().defined()) return name;
  return {};
}

void Trainer::stop_on_stray_gradient(const Decision& decision, const std::string& name, int phase) const {
  const std::string& phase_name = phases_.phase(phase).name;
  const std::string what = decision.stray_rank == strategy_->rank()
                               ? fmt::format("parameter '{}' got a gradient", name)
                               : fmt::format("a parameter got a gradient on rank {}", decision.stray_rank);
  throw Error(fmt::format("step {}: {} in a step of training phase '{}', which does not train it; every rank stopped "
                          "before the optimizer applied it",
                          state_.step + 1, what, phase_name),
              fmt::format("the model plugin's training_step must run what phase '{}' does not train without autograd "
                          "(torch::NoGradGuard, or detach its outputs)",
                          phase_name));
}

void Trainer::check_master_weights() {
  if (strategy_->is_main())
    spdlog::info("master weights: {}", masters_->describe(strategy_->unit_gradients_final()));
  if (strategy_->world_size() == 1) return;
  // The ranks of one network group hold the same network (every rank, without groups): a pair of
  // slots a group, this rank's in its group's, the rest the lowest value.
  const NetworkGroups* groups = strategy_->network_groups();
  const std::size_t count = groups != nullptr ? groups->sizes.size() : 1;
  const std::size_t mine_at = groups != nullptr ? static_cast<std::size_t>(groups->group) : 0;
  std::vector<double> slots(2 * count, -std::numeric_limits<double>::infinity());
  const double mine = masters_->fingerprint();
  slots[2 * mine_at] = mine;
  slots[2 * mine_at + 1] = -mine;
  const std::vector<double> extremes = strategy_->all_reduce(std::move(slots), Reduce::Max);
  if (extremes[2 * mine_at] != -extremes[2 * mine_at + 1])
    throw Error(fmt::format("rank {}: the ranks built different fp32 master weights{}", strategy_->rank(),
                            groups != nullptr ? fmt::format(" of network group {}", groups->group) : ""),
                "every rank must build the model alike: the same run.seed and weights files, and an initialisation "
                "that draws only from the seeded generators");
}

void Trainer::check_averages_written(const StatePieces& pieces) {
  if (parameter_averages(optimizer_->adamw()) == nullptr) return;
  const auto wrote = [&](const char* suffix) {
    return std::ranges::any_of(pieces.optimizer, [&](const TensorRows& rows) { return rows.name.ends_with(suffix); });
  };
  const bool left_out = wrote(".exp_avg") && !wrote(".ema");  // moments of this rank's rows, no averages
  if (strategy_->all_reduce({left_out ? 1.0 : 0.0}, Reduce::Max).at(0) > 0)
    throw Error(fmt::format("{} wrote its checkpoint pieces without the run's averages (the ema section)",
                            strategy_->describe()),
                "the strategy's state_pieces must write each average's rows as \"<parameter>.ema\" "
                "(wanfw/parameter_averages.hpp); or train without ema.decay");
}

}  // namespace wanfw
