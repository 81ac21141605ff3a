#pragma once
// Batches, the fields a model declares, data sets, and samplers.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// How the synthetic data set fills a field.
enum class FieldDistribution { Normal, Uniform, Integer };

/// One tensor of every sample, as a model declares it: `shape` is per sample (no batch dim).
struct FieldSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  FieldDistribution distribution = FieldDistribution::Normal;
  std::int64_t integer_high = 2;  ///< Integer fields draw from [0, integer_high)
};

/// A batch: one tensor per field, each with the batch as its first dimension, and the identity
/// of every sample, which keys its random draws (wanfw/sample_random.hpp).
struct Batch {
  std::map<std::string, at::Tensor> fields;
  std::int64_t size = 0;
  /// Each sample's index in its data set, in batch order (size() of them).
  std::vector<std::int64_t> sample_ids;
  /// The epoch the batch belongs to (validation batches: 0, so their draws repeat).
  std::int64_t epoch = 0;
  /// The seed of the batch's random streams: the run's seed (validation: one of its own).
  std::uint64_t seed = 0;

  /// The field `name`; throws wanfw::Error naming the missing field and those present.
  const at::Tensor& at(const std::string& name) const;
  /// A copy with every field moved to `device`.
  Batch to(const at::Device& device, bool non_blocking = false) const;
  /// Samples [start, start + length): views of the fields, with their ids.
  Batch slice(std::int64_t start, std::int64_t length) const;
  /// Where the fields live (the CPU for a batch without fields).
  at::Device device() const;
};

/// A map-style data set: sample `index` is a pure function of the index (and the data set's
/// construction), so any worker may produce any sample.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  /// One sample: tensors without the batch dimension.
  virtual std::map<std::string, at::Tensor> get(std::int64_t index) const = 0;
};

/// Deterministic random data with the fields a model declares: sample i depends only on the
/// seed and i.
class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(std::vector<FieldSpec> fields, std::int64_t size, std::uint64_t seed);
  std::int64_t size() const override { return size_; }
  std::map<std::string, at::Tensor> get(std::int64_t index) const override;

 private:
  std::vector<FieldSpec> fields_;
  std::int64_t size_;
  std::uint64_t seed_;
};

/// Stacks samples into a batch (without ids: the caller that knows them sets them).
Batch collate(const std::vector<std::map<std::string, at::Tensor>>& samples);

/// The order in which one rank visits the data set in one epoch.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// Re-deals the order for `epoch` (shuffled samplers reshuffle, identically on every rank).
  virtual void set_epoch(std::int64_t epoch) = 0;
  /// The indices this rank visits in the current epoch, in order.
  virtual const std::vector<std::int64_t>& indices() const = 0;
};

/// Shards a data set of `dataset_size` samples over `world_size` ranks: the shards are disjoint
/// and together cover the data set (with `drop_last`, the tail that does not divide evenly is
/// dropped; without it, the first samples are repeated to pad every shard to equal length).
/// With `shuffle`, the permutation depends only on (seed, epoch).
class ShardedSampler final : public Sampler {
 public:
  struct Options {
    std::int64_t dataset_size = 0;
    int rank = 0;
    int world_size = 1;
    bool shuffle = true;
    bool drop_last = false;
    std::uint64_t seed = 0;
  };
  explicit ShardedSampler(Options options);
  void set_epoch(std::int64_t epoch) override;
  const std::vector<std::int64_t>& indices() const override { return indices_; }

 private:
  Options options_;
  std::vector<std::int64_t> indices_;
};

}  // namespace wanfw
