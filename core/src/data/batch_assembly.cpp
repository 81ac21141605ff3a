#include "data/batch_assembly.hpp"

#include <algorithm>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "data/batch_buffers.hpp"
#include "numerics/finite_copy.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

BatchAssembly::BatchAssembly(const std::vector<Sample>& samples, const std::vector<std::string>& padded,
                             const std::map<std::string, at::ScalarType>& dtypes, BatchBuffers* buffers, bool pin)
    : padded_(padded) {
  if (samples.empty()) return;
  const auto count = static_cast<std::int64_t>(samples.size());
  for (const auto& [name, first] : samples.front()) {
    const bool pad = std::ranges::count(padded_, name) > 0;
    std::vector<std::int64_t> shape = {count};
    shape.insert(shape.end(), first.sizes().begin(), first.sizes().end());
    for (const auto& sample : samples) {
      const auto it = sample.find(name);
      if (it == sample.end())
        throw Error(fmt::format("collate: field '{}' is missing from a sample of the batch", name));
      const at::Tensor& part = it->second;
      if (part.dim() != first.dim() || (!pad && part.sizes() != first.sizes()) ||
          (pad && (part.dim() == 0 || part.sizes().slice(1) != first.sizes().slice(1))))
        throw Error(fmt::format("collate: field '{}' has shapes [{}] and [{}] in one batch", name,
                                fmt::join(first.sizes(), ", "), fmt::join(part.sizes(), ", ")));
      if (pad) shape[1] = std::max(shape[1], part.size(0));
    }
    const auto wanted = dtypes.find(name);
    const at::ScalarType dtype = wanted != dtypes.end() ? wanted->second : first.scalar_type();
    fields_[name] = buffers ? buffers->empty(shape, dtype, pin)
                            : at::empty(shape, at::TensorOptions().dtype(dtype).pinned_memory(pin));
  }
}

std::optional<BatchAssembly::NonFinite> BatchAssembly::add(const Sample& sample, bool refuse_nonfinite) {
  std::optional<NonFinite> found;
  for (auto& [name, batch] : fields_) {
    const at::Tensor& part = sample.at(name);
    at::Tensor row = batch[rows_];
    const bool padded = std::ranges::count(padded_, name) > 0;
    at::Tensor filled = padded ? row.narrow(0, 0, part.size(0)) : row;
    if (!copy_finite(filled, part) && !found) {
      found = NonFinite{name, count_nonfinite(filled), filled.numel()};
      if (refuse_nonfinite) return found;
    }
    if (padded && part.size(0) < row.size(0)) row.narrow(0, part.size(0), row.size(0) - part.size(0)).zero_();
  }
  ++rows_;
  return found;
}

Batch BatchAssembly::finish() {
  Batch batch;
  batch.size = rows_;
  for (auto& [name, tensor] : fields_)
    batch.fields[name] = rows_ == tensor.size(0) ? tensor : tensor.narrow(0, 0, rows_);
  return batch;
}

Batch collate(const std::vector<Sample>& samples, const std::vector<std::string>& padded, bool pin) {
  BatchAssembly assembly(samples, padded, {}, nullptr, pin);
  for (const auto& sample : samples) assembly.add(sample, /*refuse_nonfinite=*/false);  // the caller checks values
  return assembly.finish();
}

}  // namespace wanfw
