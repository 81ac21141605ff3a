#pragma once
// The `synthetic` data set: deterministic random samples with exactly the fields a model
// declares. The plugin (plugins/datasets/synthetic/plugin.cpp) and `wanfw data synth` build it
// from this library (libwanfw_synthetic).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wanfw/data.hpp"

namespace wanfw {

/// Deterministic random data with the fields a model declares: sample i depends only on the
/// seed and i, and is in bucket i mod buckets.size(). `tokens` is the length of dim::tokens
/// dimensions (0: each field's max_tokens). With `patterns`, latent-like fields (those with a
/// bucket dimension) are one of a few smooth patterns plus noise, and every other field is the
/// pattern's own caption, so a model can learn to denoise them: a loss that visibly falls.
class SyntheticDataset final : public Dataset {
 public:
  static constexpr std::int64_t kPatterns = 8;
  struct Options {
    std::int64_t size = 1;
    std::uint64_t seed = 0;
    std::vector<Bucket> buckets = {Bucket{}};
    std::int64_t tokens = 0;
    bool patterns = false;
    /// With patterns: distinct captions; pattern p carries caption p mod captions (8: one each;
    /// fewer: a caption stands for several patterns, a multimodal conditional distribution).
    std::int64_t captions = kPatterns;
  };
  SyntheticDataset(std::vector<FieldSpec> fields, Options options);
  std::int64_t size() const override { return options_.size; }
  Sample get(std::int64_t index) const override;
  const std::vector<Bucket>& buckets() const override { return options_.buckets; }
  std::int64_t bucket_of(std::int64_t index) const override;
  Sample empty_caption() const override;
  std::shared_ptr<Dataset> validation_set(std::int64_t max_samples, std::uint64_t seed) const override;
  std::string summary() const override;
  /// The pattern (caption class) of sample `index` when `patterns` is on.
  std::int64_t pattern_of(std::int64_t index) const;

 private:
  std::vector<std::int64_t> concrete_shape(const FieldSpec& field, const Bucket& bucket, std::int64_t tokens) const;
  std::vector<FieldSpec> fields_;
  Options options_;
  std::uint64_t pattern_seed_;  ///< keys patterns and captions: the training set's seed
};

}  // namespace wanfw
