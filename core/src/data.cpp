#include "wanfw/data.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "generators.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

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
  for (const auto& [name, tensor] : fields) out.fields[name] = tensor.to(device, non_blocking);
  return out;
}

Batch Batch::slice(std::int64_t start, std::int64_t length) const {
  if (start < 0 || length < 0 || start + length > size)
    throw Error(fmt::format("samples [{}, {}) are outside a batch of {}", start, start + length, size));
  Batch out;
  out.size = length;
  out.epoch = epoch;
  out.seed = seed;
  if (!sample_ids.empty())
    out.sample_ids.assign(sample_ids.begin() + start, sample_ids.begin() + start + length);
  for (const auto& [name, tensor] : fields) out.fields[name] = tensor.narrow(0, start, length);
  return out;
}

at::Device Batch::device() const { return fields.empty() ? at::Device(at::kCPU) : fields.begin()->second.device(); }

SyntheticDataset::SyntheticDataset(std::vector<FieldSpec> fields, std::int64_t size, std::uint64_t seed)
    : fields_(std::move(fields)), size_(size), seed_(seed) {
  if (size_ <= 0) throw Error(fmt::format("a synthetic data set needs at least one sample, got {}", size_));
}

std::map<std::string, at::Tensor> SyntheticDataset::get(std::int64_t index) const {
  std::map<std::string, at::Tensor> sample;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed_ ^ mix_seed(static_cast<std::uint64_t>(index))));
  for (const auto& field : fields_) {
    const auto options = at::TensorOptions().dtype(field.dtype);
    at::Tensor value;
    switch (field.distribution) {
      case FieldDistribution::Normal: value = at::randn(field.shape, generator, options); break;
      case FieldDistribution::Uniform: value = at::rand(field.shape, generator, options); break;
      case FieldDistribution::Integer: value = at::randint(field.integer_high, field.shape, generator, options); break;
    }
    sample.emplace(field.name, std::move(value));
  }
  return sample;
}

Batch collate(const std::vector<std::map<std::string, at::Tensor>>& samples) {
  Batch batch;
  batch.size = static_cast<std::int64_t>(samples.size());
  if (samples.empty()) return batch;
  for (const auto& [name, _] : samples.front()) {
    std::vector<at::Tensor> parts;
    parts.reserve(samples.size());
    for (const auto& sample : samples) parts.push_back(sample.at(name));
    batch.fields[name] = at::stack(parts);
  }
  return batch;
}

ShardedSampler::ShardedSampler(Options options) : options_(options) {
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size)
    throw Error(fmt::format("invalid shard: rank {} of world size {}", options_.rank, options_.world_size));
  if (options_.dataset_size < (options_.drop_last ? options_.world_size : 1))
    throw Error(fmt::format("the data set has {} samples, too few to give each of {} ranks one",
                            options_.dataset_size, options_.world_size),
                "use a larger data set or fewer ranks");
  set_epoch(0);
}

void ShardedSampler::set_epoch(std::int64_t epoch) {
  const std::int64_t n = options_.dataset_size;
  const std::int64_t world = options_.world_size;
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  if (options_.shuffle) {
    // The same permutation PyTorch's DistributedSampler draws: randperm seeded with seed + epoch.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(options_.seed + static_cast<std::uint64_t>(epoch));
    const at::Tensor perm = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
    const auto* p = perm.data_ptr<std::int64_t>();
    order.assign(p, p + n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  }
  const std::int64_t per_rank = options_.drop_last ? n / world : (n + world - 1) / world;
  const std::int64_t total = per_rank * world;
  for (std::int64_t i = n; i < total; ++i) order.push_back(order[static_cast<std::size_t>((i - n) % n)]);
  order.resize(static_cast<std::size_t>(total));
  indices_.clear();
  for (std::int64_t i = options_.rank; i < total; i += world) indices_.push_back(order[static_cast<std::size_t>(i)]);
}

}  // namespace wanfw
