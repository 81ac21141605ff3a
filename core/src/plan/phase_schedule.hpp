#pragma once
// Internal: which of the model's training phases (wanfw::TrainingPhase) each optimizer step
// trains. The phases take turns in a fixed cycle, so a step's phase and the number of updates a
// phase had before it follow from the step number alone: a resumed run, on any layout, continues
// the cycle where it stopped.

#include <cstdint>
#include <string>
#include <vector>

#include "wanfw/model.hpp"

namespace wanfw {

class PhaseSchedule {
 public:
  /// `phases` as Model::phases() declares them (empty: one phase "train" of every group), checked
  /// against the model's `groups`: every phase has a unique name, at least one step and known
  /// groups; every group with parameters belongs to exactly one phase. Throws wanfw::Error.
  PhaseSchedule(std::vector<TrainingPhase> phases, const std::vector<ParameterGroup>& groups);
  /// One phase, every step.
  PhaseSchedule() : PhaseSchedule({}, {}) {}

  /// Whether the model declared phases (then losses are logged per phase too).
  bool declared() const { return declared_; }
  int count() const { return static_cast<int>(phases_.size()); }
  const TrainingPhase& phase(int index) const { return phases_.at(static_cast<std::size_t>(index)); }
  /// The phase of optimizer step `step` (0-based).
  int phase_at(std::int64_t step) const;
  /// How many of the optimizer steps 0 .. step-1 belong to `phase`: the index of its update at `step`.
  std::int64_t updates_before(int phase, std::int64_t step) const;
  /// "generator 1 step, then critic 5 steps (per cycle of 6): 10 and 50 updates in 60 steps".
  std::string describe(std::int64_t total_steps) const;

 private:
  std::vector<TrainingPhase> phases_;
  std::vector<std::int64_t> offsets_;  ///< each phase's first step within a cycle
  std::int64_t cycle_ = 1;
  bool declared_ = false;
};

}  // namespace wanfw
