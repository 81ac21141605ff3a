#pragma once
// Internal: scoring the model on the held-out set every `validation.every` steps, and its
// preview images.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "config/core_sections.hpp"
#include "data/training_data.hpp"
#include "reporting/logger_set.hpp"
#include "train/preview_video.hpp"
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
  /// The main process's previews of the first `validation.preview_samples` held-out samples (or
  /// prompts of validation.preview_prompts; TrainingData::preview_batch): with
  /// a decoder from `make_decoder`, videos (preview_video.hpp) into `run_dir`/previews/step-N/;
  /// else the model's preview images, to the loggers. The other ranks return at once.
  void previews(std::int64_t step, LoggerSet& loggers, const DecoderFactory& make_decoder,
                const std::filesystem::path& run_dir);

 private:
  const CoreSettings& settings_;
  const TrainingData& data_;
  Model& model_;
  Strategy& strategy_;
};

}  // namespace wanfw
