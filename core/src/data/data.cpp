#include "wanfw/data.hpp"

#include <algorithm>
#include <charconv>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

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
  out.weight = weight;
  out.step_positions = step_positions;
  out.step_samples = step_samples;
  out.step = step;
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
  out.weight = weight;  // a replica's slice weighs by its share of it on top (Strategy::backward)
  out.dtypes = dtypes;
  out.step_samples = step_samples;
  out.step = step;
  if (!step_positions.empty())
    out.step_positions.assign(step_positions.begin() + start, step_positions.begin() + start + length);
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

}  // namespace wanfw
