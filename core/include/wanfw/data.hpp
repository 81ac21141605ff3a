#pragma once
// Batches, the fields a model declares, buckets and data sets.
//
// A model declares the fields every sample must carry (FieldSpec); a data set (a `dataset`
// plugin: the synthetic set, the latent-shard reader, or a user's own) yields samples by index,
// each in a bucket (a shape group: frames x height x width of its latents). The core's sampler
// shuffles, buckets and shards them: every batch comes from one bucket.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// Sizes a field's dimension takes from its sample rather than from the model. A field shape
/// like {16, dim::frames, dim::height, dim::width} fits latents of any bucket; {dim::tokens, 4096}
/// a text embedding of any length up to FieldSpec::max_tokens.
namespace dim {
inline constexpr std::int64_t frames = -1;  ///< the sample's bucket's frames
inline constexpr std::int64_t height = -2;  ///< the sample's bucket's height
inline constexpr std::int64_t width = -3;   ///< the sample's bucket's width
/// Varies from sample to sample (a caption's tokens); batches zero-pad it to their longest sample.
inline constexpr std::int64_t tokens = -4;
}  // namespace dim

/// "frames", "height", "width", "tokens", or the size itself for a fixed dimension.
std::string dim_text(std::int64_t size);

/// How the synthetic data set fills a field.
enum class FieldDistribution { Normal, Uniform, Integer };

/// One tensor of every sample, as a model declares it: `shape` is per sample (no batch dim);
/// a dimension is a fixed size or one of the `dim` sizes.
struct FieldSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  at::ScalarType dtype = at::kFloat;  ///< samples are converted to it (shards keep bf16 on disk)
  FieldDistribution distribution = FieldDistribution::Normal;
  std::int64_t integer_high = 2;  ///< Integer fields draw from [0, integer_high)
  std::int64_t max_tokens = 0;    ///< the longest a dim::tokens dimension may be (0: no limit)
};

/// "[16, frames, height, width]".
std::string shape_text(const FieldSpec& field);

/// A shape group: the latent frames x height x width that every sample in it shares.
struct Bucket {
  std::int64_t frames = 1, height = 1, width = 1;
  /// "5x16x16".
  std::string name() const;
  /// Parses "FxHxW" (positive integers); throws wanfw::Error naming `text` otherwise.
  static Bucket parse(const std::string& text);
  bool operator==(const Bucket&) const = default;
  auto operator<=>(const Bucket&) const = default;
};

/// The fields of one sample, without the batch dimension.
using Sample = std::map<std::string, at::Tensor>;

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
  /// Fields still in their stored dtype (bf16 latents on their way to a GPU), and the dtype the
  /// model declared for them: to() converts them on arrival, so the copy moves half the bytes and
  /// the conversion runs on the device.
  std::map<std::string, at::ScalarType> dtypes;
  /// This micro-batch's weight in its step's loss: its samples over an even share of the step
  /// (the step batch / data world size / micro-batches). 1, except with networks on rank groups
  /// (wanfw/parallel/network_groups.hpp), where a rank holds as many samples as its network got, and 0 for
  /// a stand-in sample that only keeps its group's collectives in step.
  double weight = 1.0;
  /// Training batches: each sample's place in its optimizer step's batch (0 .. step_samples - 1),
  /// the same on any layout (a model may stratify its draws over a step with it); empty elsewhere.
  std::vector<std::int64_t> step_positions{};
  std::int64_t step_samples = 0;
  /// Training batches: the optimizer step's index in its epoch, the same on every rank and
  /// micro-batch of the step (wanfw::step_rand draws once a step with it); -1 elsewhere.
  std::int64_t step = -1;

  /// The field `name`; throws wanfw::Error naming the missing field and those present.
  const at::Tensor& at(const std::string& name) const;
  /// A copy with every field moved to `device` (and converted to its entry in `dtypes`).
  Batch to(const at::Device& device, bool non_blocking = false) const;
  /// Samples [start, start + length): views of the fields, with their ids.
  Batch slice(std::int64_t start, std::int64_t length) const;
  /// Where the fields live (the CPU for a batch without fields).
  at::Device device() const;
};

/// A map-style data set: sample `index` is a pure function of the index (and the data set's
/// construction), so any worker thread may produce any sample, concurrently.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  /// One sample: the fields the model declared, without the batch dimension. Throws
  /// wanfw::DataError naming the sample and its file when it cannot be read.
  virtual Sample get(std::int64_t index) const = 0;
  /// The shape groups of the data set, and the group of each sample (an index into buckets()).
  virtual const std::vector<Bucket>& buckets() const = 0;
  virtual std::int64_t bucket_of(std::int64_t index) const = 0;
  /// The sample as a user knows it, for messages and sample logs: "clip_0003 (shard-00001.safetensors)".
  virtual std::string describe_sample(std::int64_t index) const;
  /// The fields that stand in for a sample's caption under caption dropout (the empty prompt's
  /// text embedding, under the caption fields' names). Empty: the data set has none.
  virtual Sample empty_caption() const { return {}; }
  /// A held-out set for validation, of at most `max_samples` samples; `seed` keys whatever it
  /// draws. Null: the data set has none (validation needs one).
  virtual std::shared_ptr<Dataset> validation_set(std::int64_t max_samples, std::uint64_t seed) const;
  /// One line for the start of a run: what the data set is and where it comes from.
  virtual std::string summary() const;
};

/// Checks `sample` against the declared fields (every field present, its shape fits the spec and
/// the bucket, tokens within max_tokens, floating values finite) and, with `convert`, converts each
/// field to its declared dtype; extra fields are dropped. Throws wanfw::DataError naming
/// `sample_name`, the field and what is wrong.
Sample conform_sample(Sample sample, const std::vector<FieldSpec>& fields, const Bucket& bucket,
                      const std::string& sample_name, bool convert = true);

/// Stacks samples into a batch (without ids: the caller that knows them sets them), each field
/// copied once into its batch tensor (in pinned memory with `pin`). Fields listed in `padded`
/// (dim::tokens as their first dimension) are zero-padded to the batch's longest sample.
Batch collate(const std::vector<Sample>& samples, const std::vector<std::string>& padded = {}, bool pin = false);

}  // namespace wanfw
