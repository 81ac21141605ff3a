#pragma once
// Internal: the checks a sample passes on its way into a batch.

#include <functional>
#include <string>
#include <vector>

#include "wanfw/data.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

/// Throws wanfw::DataError when `sample` lacks one of `fields` or a field's shape does not fit its
/// spec and `bucket`; `name` (the sample as a user knows it) is formatted only then. Reads no
/// values: the loader checks them while it copies them into the batch.
void check_sample_shapes(const Sample& sample, const std::vector<FieldSpec>& fields, const Bucket& bucket,
                         const std::function<std::string()>& name);

/// The error for a field holding `count` NaN or infinite values of `numel`.
DataError nonfinite_error(const std::string& sample_name, const std::string& field, std::int64_t count,
                          std::int64_t numel);

}  // namespace wanfw
