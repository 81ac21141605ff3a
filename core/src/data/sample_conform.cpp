// A sample against the fields a model declares: shapes, dtypes, finite values.

#include "data/sample_conform.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "numerics/finite_copy.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

void check_sample_shapes(const Sample& sample, const std::vector<FieldSpec>& fields, const Bucket& bucket,
                         const std::function<std::string()>& name) {
  for (const auto& field : fields) {
    auto it = sample.find(field.name);
    if (it == sample.end()) {
      std::vector<std::string> present;
      for (const auto& [key, _] : sample) present.push_back(key);
      throw DataError(fmt::format("{}: has no field '{}' (it has: {})", name(), field.name, fmt::join(present, ", ")),
                      "the model needs every field it declares; re-encode the data set with the model's fields");
    }
    const at::Tensor& value = it->second;
    const at::ScalarType dtype = value.scalar_type();
    const bool real = at::isFloatingType(dtype) && !at::isComplexType(dtype);
    if (at::isFloatingType(field.dtype) ? !real : !at::isIntegralType(dtype, /*includeBool=*/false))
      throw DataError(fmt::format("{}: field '{}' holds {} values ({}); the model takes {}", name(), field.name,
                                  at::isComplexType(dtype) ? "complex" : real ? "floating-point" : "integer",
                                  c10::toString(dtype),
                                  at::isFloatingType(field.dtype) ? "real floating-point values" : "integers"),
                      "encode the field as real numbers (F32, BF16 or F16), or set data.on_bad_sample: skip to "
                      "train without the sample");
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
      throw DataError(fmt::format("{}: field '{}' has shape [{}], but the model needs {} (bucket {}{})", name(),
                                  field.name, fmt::join(value.sizes(), ", "), shape_text(field), bucket.name(),
                                  field.max_tokens > 0 ? fmt::format(", at most {} tokens", field.max_tokens) : ""),
                      "encode the data for this model (latent channels, text width), or choose the model the data "
                      "was encoded for");
  }
}

DataError nonfinite_error(const std::string& sample_name, const std::string& field, std::int64_t count,
                          std::int64_t numel) {
  return DataError(fmt::format("{}: field '{}' holds {} NaN or infinite value(s) of {}", sample_name, field, count,
                               numel),
                   "re-encode the sample, or set data.on_bad_sample: skip to train without it");
}

Sample conform_sample(Sample sample, const std::vector<FieldSpec>& fields, const Bucket& bucket,
                      const std::string& sample_name, bool convert) {
  check_sample_shapes(sample, fields, bucket, [&] { return sample_name; });
  Sample out;
  for (const auto& field : fields) {
    const at::Tensor& value = sample.at(field.name);
    at::Tensor converted = value;
    bool finite;
    if (convert && value.scalar_type() != field.dtype) {
      converted = at::empty(value.sizes(), value.options().dtype(field.dtype));
      finite = copy_finite(converted, value);
    } else {
      finite = all_finite(value);
    }
    if (!finite) throw nonfinite_error(sample_name, field.name, count_nonfinite(converted), converted.numel());
    out.emplace(field.name, std::move(converted));
  }
  return out;
}

}  // namespace wanfw
