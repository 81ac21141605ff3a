#include "wanfw/data.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "generators.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

std::string dim_text(std::int64_t size) {
  switch (size) {
    case dim::frames: return "frames";
    case dim::height: return "height";
    case dim::width: return "width";
    case dim::tokens: return "tokens";
    default: return std::to_string(size);
  }
}

std::string shape_text(const FieldSpec& field) {
  std::vector<std::string> dims;
  for (const std::int64_t size : field.shape) dims.push_back(dim_text(size));
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

std::string Bucket::name() const { return fmt::format("{}x{}x{}", frames, height, width); }

Bucket Bucket::parse(const std::string& text) {
  std::int64_t sizes[3] = {0, 0, 0};
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 3; ++i) {
    const auto [next, ec] = std::from_chars(p, end, sizes[i]);
    const bool separator_ok = i == 2 ? next == end : (next != end && *next == 'x');
    if (ec != std::errc() || sizes[i] < 1 || sizes[i] > 1'000'000 || !separator_ok)
      throw Error(fmt::format("'{}' is not a bucket: latent frames x height x width, each a positive integer",
                              shortened(text)),
                  "for example \"5x16x16\"");
    p = next + 1;
  }
  return {sizes[0], sizes[1], sizes[2]};
}

const at::Tensor& Batch::at(const std::string& name) const {
  auto it = fields.find(name);
  if (it == fields.end()) {
    std::vector<std::string> present;
    for (const auto& [key, _] : fields) present.push_back(key);
    throw Error(fmt::format("the batch has no field '{}' (it has: {})", name, fmt::join(present, ", ")),
                "the data set must produce every field the model declares in batch_fields()");
  }
  return it->second;
}

Batch Batch::to(const at::Device& device, bool non_blocking) const {
  Batch out;
  out.size = size;
  out.sample_ids = sample_ids;
  out.epoch = epoch;
  out.seed = seed;
  for (const auto& [name, tensor] : fields) {
    const auto dtype = dtypes.find(name);
    out.fields[name] = tensor.to(device, dtype == dtypes.end() ? tensor.scalar_type() : dtype->second, non_blocking);
  }
  return out;
}

Batch Batch::slice(std::int64_t start, std::int64_t length) const {
  if (start < 0 || length < 0 || start + length > size)
    throw Error(fmt::format("samples [{}, {}) are outside a batch of {}", start, start + length, size));
  Batch out;
  out.size = length;
  out.epoch = epoch;
  out.seed = seed;
  out.dtypes = dtypes;
  if (!sample_ids.empty())
    out.sample_ids.assign(sample_ids.begin() + start, sample_ids.begin() + start + length);
  for (const auto& [name, tensor] : fields) out.fields[name] = tensor.narrow(0, start, length);
  return out;
}

at::Device Batch::device() const { return fields.empty() ? at::Device(at::kCPU) : fields.begin()->second.device(); }

std::string Dataset::describe_sample(std::int64_t index) const { return fmt::format("sample {}", index); }

std::shared_ptr<Dataset> Dataset::validation_set(std::int64_t /*max_samples*/, std::uint64_t /*seed*/) const {
  return nullptr;
}

std::string Dataset::summary() const {
  return fmt::format("{} samples in {} bucket(s)", size(), buckets().size());
}

// --- the synthetic set --------------------------------------------------------------------------

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
    const auto pattern = static_cast<std::uint64_t>(pattern_of(index));
    auto fixed = generator_for(pattern_seed_ ^ 0x7a77e7ULL, pattern, std::hash<std::string>{}(field.name));
    if (has_bucket_dims(field) && field.distribution == FieldDistribution::Normal) {
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
                     options_.patterns ? fmt::format("{} learnable patterns", kPatterns) : "random normal",
                     fmt::join(names, ", "));
}

// --- checking and batching ------------------------------------------------------------------------

Sample conform_sample(Sample sample, const std::vector<FieldSpec>& fields, const Bucket& bucket,
                      const std::string& sample_name, bool convert) {
  Sample out;
  for (const auto& field : fields) {
    auto it = sample.find(field.name);
    if (it == sample.end()) {
      std::vector<std::string> present;
      for (const auto& [name, _] : sample) present.push_back(name);
      throw DataError(fmt::format("{}: has no field '{}' (it has: {})", sample_name, field.name, fmt::join(present, ", ")),
                      "the model needs every field it declares; re-encode the data set with the model's fields");
    }
    const at::Tensor& value = it->second;
    bool fits = value.dim() == static_cast<std::int64_t>(field.shape.size());
    for (std::int64_t d = 0; fits && d < value.dim(); ++d) {
      const std::int64_t want = field.shape[static_cast<std::size_t>(d)], got = value.size(d);
      switch (want) {
        case dim::frames: fits = got == bucket.frames; break;
        case dim::height: fits = got == bucket.height; break;
        case dim::width: fits = got == bucket.width; break;
        case dim::tokens: fits = got >= 1 && (field.max_tokens == 0 || got <= field.max_tokens); break;
        default: fits = got == want;
      }
    }
    if (!fits)
      throw DataError(fmt::format("{}: field '{}' has shape {}, but the model needs {} (bucket {}{})", sample_name,
                                  field.name, fmt::format("[{}]", fmt::join(value.sizes(), ", ")), shape_text(field),
                                  bucket.name(),
                                  field.max_tokens > 0 ? fmt::format(", at most {} tokens", field.max_tokens) : ""),
                      "encode the data for this model (latent channels, text width), or choose the model the data "
                      "was encoded for");
    at::Tensor converted = !convert || value.scalar_type() == field.dtype ? value : value.to(field.dtype);
    // One vectorised read (accumulated in fp32 inside): a NaN or Inf makes the sum non-finite (values
    // large enough to overflow it are then counted exactly, and pass).
    const bool floating = at::isFloatingType(converted.scalar_type());
    if (floating && !std::isfinite(converted.sum().item<double>()) &&
        !at::isfinite(converted).all().item<bool>()) {
      const auto bad = (~at::isfinite(converted)).sum().item<std::int64_t>();
      throw DataError(fmt::format("{}: field '{}' holds {} NaN or infinite value(s) of {}", sample_name, field.name, bad,
                                  converted.numel()),
                      "re-encode the sample, or set data.on_bad_sample: skip to train without it");
    }
    out.emplace(field.name, std::move(converted));
  }
  return out;
}

Batch collate(const std::vector<Sample>& samples, const std::vector<std::string>& padded, bool pin) {
  Batch batch;
  batch.size = static_cast<std::int64_t>(samples.size());
  if (samples.empty()) return batch;
  for (const auto& [name, first] : samples.front()) {
    const bool pad = std::ranges::count(padded, name) > 0;
    std::vector<std::int64_t> shape = {batch.size};
    shape.insert(shape.end(), first.sizes().begin(), first.sizes().end());
    for (const auto& sample : samples) {
      const at::Tensor& part = sample.at(name);
      if (part.dim() != first.dim() || (!pad && part.sizes() != first.sizes()) ||
          (pad && part.sizes().slice(1) != first.sizes().slice(1)))
        throw Error(fmt::format("collate: field '{}' has shapes [{}] and [{}] in one batch", name,
                                fmt::join(first.sizes(), ", "), fmt::join(part.sizes(), ", ")));
      if (pad) shape[1] = std::max(shape[1], part.size(0));
    }
    // One copy of each sample, straight into the (pinned) batch tensor; padding stays zero.
    at::Tensor out = pad ? at::zeros(shape, first.options().pinned_memory(pin))
                         : at::empty(shape, first.options().pinned_memory(pin));
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const at::Tensor& part = samples[i].at(name);
      out[static_cast<std::int64_t>(i)].narrow(0, 0, part.size(0)).copy_(part);
    }
    batch.fields[name] = out;
  }
  return batch;
}

}  // namespace wanfw
