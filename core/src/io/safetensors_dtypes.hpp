#pragma once
// The safetensors dtype names and the LibTorch dtypes they stand for.

#include <string>

#include <c10/core/ScalarType.h>

namespace wanfw {

/// The LibTorch dtype of a safetensors dtype name ("BF16"); false for names LibTorch cannot hold.
bool safetensors_dtype_from_name(const std::string& name, at::ScalarType* out);

}  // namespace wanfw
