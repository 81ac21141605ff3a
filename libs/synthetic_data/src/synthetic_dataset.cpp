// The synthetic data set: noise, or learnable patterns with captions of their own.

#include "synthetic/synthetic_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wanfw {

namespace {

bool is_bucket_dim(std::int64_t size) { return size == dim::frames || size == dim::height || size == dim::width; }

bool has_bucket_dims(const FieldSpec& field) { return std::ranges::any_of(field.shape, is_bucket_dim); }

at::Generator generator_for(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0) {
  return at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed ^ mix_seed(a ^ mix_seed(b))));
}

at::Tensor draw(const FieldSpec& field, const std::vector<std::int64_t>& shape, at::Generator& generator) {
  const auto options = at::TensorOptions().dtype(field.dtype);
  switch (field.distribution) {
    case FieldDistribution::Uniform: return at::rand(shape, generator, options);
    case FieldDistribution::Integer: return at::randint(field.integer_high, shape, generator, options);
    case FieldDistribution::Normal: break;
  }
  return at::randn(shape, generator, options);
}

/// A smooth pattern over a latent of `shape` ([C, F, H, W] or any shape whose bucket dimensions are
/// its last ones): a few plane waves in normalised coordinates, so it exists at every bucket size.
at::Tensor smooth_pattern(const std::vector<std::int64_t>& shape, at::Generator& generator) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const auto n = static_cast<std::int64_t>(shape.size());
  at::Tensor out = at::zeros(shape, f32);
  std::vector<at::Tensor> coords;  // one per dimension, broadcastable
  for (std::int64_t d = 0; d < n; ++d) {
    std::vector<std::int64_t> view(static_cast<std::size_t>(n), 1);
    view[static_cast<std::size_t>(d)] = shape[static_cast<std::size_t>(d)];
    coords.push_back(at::linspace(0, 1, shape[static_cast<std::size_t>(d)], f32).view(view));
  }
  for (int wave = 0; wave < 3; ++wave) {
    const at::Tensor frequency = at::randint(-3, 4, {n}, generator, f32);
    const at::Tensor amplitude = at::randn({shape.empty() ? 1 : shape[0]}, generator, f32);
    const double phase = 2 * std::numbers::pi * at::rand({1}, generator, f32).item<double>();
    at::Tensor angle = at::zeros({}, f32) + phase;
    for (std::int64_t d = 1; d < n; ++d) angle = angle + 2 * std::numbers::pi * frequency[d] * coords[static_cast<std::size_t>(d)];
    std::vector<std::int64_t> channel_view(static_cast<std::size_t>(n), 1);
    if (n > 0) channel_view[0] = shape[0];
    out = out + amplitude.view(channel_view) * at::cos(angle);
  }
  return out / out.std().clamp_min(1e-3);  // unit variance at every size
}

}  // namespace

SyntheticDataset::SyntheticDataset(std::vector<FieldSpec> fields, Options options)
    : fields_(std::move(fields)), options_(std::move(options)), pattern_seed_(options_.seed) {
  if (options_.size <= 0) throw Error(fmt::format("a synthetic data set needs at least one sample, got {}", options_.size));
  if (options_.buckets.empty()) throw Error("a synthetic data set needs at least one bucket");
  for (const auto& field : fields_)
    if (options_.tokens > 0 && field.max_tokens > 0 && options_.tokens > field.max_tokens &&
        std::ranges::count(field.shape, dim::tokens) > 0)
      throw Error(fmt::format("synthetic text of {} tokens is longer than field '{}' allows ({})", options_.tokens,
                              field.name, field.max_tokens));
}

std::int64_t SyntheticDataset::bucket_of(std::int64_t index) const {
  return index % static_cast<std::int64_t>(options_.buckets.size());
}

std::int64_t SyntheticDataset::pattern_of(std::int64_t index) const {
  return static_cast<std::int64_t>(mix_seed(options_.seed ^ 0x9a77e9ULL ^ mix_seed(static_cast<std::uint64_t>(index))) %
                                   kPatterns);
}

std::vector<std::int64_t> SyntheticDataset::concrete_shape(const FieldSpec& field, const Bucket& bucket,
                                                           std::int64_t tokens) const {
  std::vector<std::int64_t> shape;
  for (const std::int64_t size : field.shape) {
    switch (size) {
      case dim::frames: shape.push_back(bucket.frames); break;
      case dim::height: shape.push_back(bucket.height); break;
      case dim::width: shape.push_back(bucket.width); break;
      case dim::tokens:
        shape.push_back(tokens > 0 ? tokens : options_.tokens > 0 ? options_.tokens : std::max<std::int64_t>(field.max_tokens, 1));
        break;
      default: shape.push_back(size);
    }
  }
  return shape;
}

Sample SyntheticDataset::get(std::int64_t index) const {
  if (index < 0 || index >= options_.size)
    throw DataError(fmt::format("sample {} is outside the synthetic set of {}", index, options_.size));
  const Bucket& bucket = options_.buckets[static_cast<std::size_t>(bucket_of(index))];
  Sample sample;
  auto noise = generator_for(options_.seed, static_cast<std::uint64_t>(index));
  for (const auto& field : fields_) {
    const auto shape = concrete_shape(field, bucket, 0);
    if (!options_.patterns) {
      sample.emplace(field.name, draw(field, shape, noise));
      continue;
    }
    // Patterns and captions are the training set's (pattern seed), shared with its validation set.
    const bool latent = has_bucket_dims(field) && field.distribution == FieldDistribution::Normal;
    const auto pattern = static_cast<std::uint64_t>(pattern_of(index));
    const auto key = latent ? pattern : pattern % static_cast<std::uint64_t>(options_.captions);
    auto fixed = generator_for(pattern_seed_ ^ 0x7a77e7ULL, key, std::hash<std::string>{}(field.name));
    if (latent) {
      at::Tensor value = smooth_pattern(shape, fixed) + 0.3 * at::randn(shape, noise, at::TensorOptions().dtype(at::kFloat));
      sample.emplace(field.name, value.to(field.dtype));
    } else {
      sample.emplace(field.name, draw(field, shape, fixed));
    }
  }
  return sample;
}

Sample SyntheticDataset::empty_caption() const {
  Sample caption;
  for (const auto& field : fields_) {
    if (std::ranges::count(field.shape, dim::tokens) == 0) continue;
    auto fixed = generator_for(pattern_seed_ ^ 0xe3b7ULL, std::hash<std::string>{}(field.name));
    caption.emplace(field.name, draw(field, concrete_shape(field, Bucket{}, 1), fixed));
  }
  return caption;
}

std::shared_ptr<Dataset> SyntheticDataset::validation_set(std::int64_t max_samples, std::uint64_t seed) const {
  Options held_out = options_;
  held_out.size = max_samples;
  held_out.seed = seed;
  auto set = std::make_shared<SyntheticDataset>(fields_, held_out);
  set->pattern_seed_ = pattern_seed_;  // the same patterns and captions, new noise
  return set;
}

std::string SyntheticDataset::summary() const {
  std::vector<std::string> names;
  for (const auto& bucket : options_.buckets) names.push_back(bucket.name());
  return fmt::format("{} synthetic samples ({}) in bucket(s) {}", options_.size,
                     !options_.patterns                ? std::string("random normal")
                     : options_.captions == kPatterns ? fmt::format("{} learnable patterns", kPatterns)
                                                      : fmt::format("{} learnable patterns, {} captions", kPatterns,
                                                                    options_.captions),
                     fmt::join(names, ", "));
}

}  // namespace wanfw
