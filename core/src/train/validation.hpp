#pragma once
// Internal: scoring the model on the held-out set every `validation.every` steps, and its
// preview images.

#include <cstdint>
#include <map>
#include <string>

#include "config/core_sections.hpp"
#include "data/training_data.hpp"
#include "reporting/logger_set.hpp"
#include "wanfw/strategy.hpp"

namespace wanfw {

class Validation {
 public:
  Validation(const CoreSettings& settings, const TrainingData& data, Model& model, Strategy& strategy);

  /// True at every `validation.every` steps and at the last step, when the run has a held-out set.
  bool due(std::int64_t step, std::int64_t total_steps) const;
  /// Every rank scores its shard (padded to equal length, so collectives stay matched); returns
  /// "val/<metric>" averaged over samples and ranks.
  std::map<std::string, double> run(std::int64_t step);
  /// The model's preview images of the first held-out sample, to the loggers (main process).
  void previews(std::int64_t step, LoggerSet& loggers);

 private:
  const CoreSettings& settings_;
  const TrainingData& data_;
  Model& model_;
  Strategy& strategy_;
};

}  // namespace wanfw
