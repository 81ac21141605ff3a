#include "io/safetensors_dtypes.hpp"

#include <fmt/format.h>

#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace wanfw {

namespace {

struct DtypeEntry {
  const char* name;
  at::ScalarType type;
};

// Every safetensors dtype LibTorch can hold.
const DtypeEntry kDtypes[] = {
    {"BOOL", at::kBool},       {"U8", at::kByte},          {"I8", at::kChar},
    {"I16", at::kShort},       {"U16", at::kUInt16},       {"I32", at::kInt},
    {"U32", at::kUInt32},      {"I64", at::kLong},         {"U64", at::kUInt64},
    {"F16", at::kHalf},        {"BF16", at::kBFloat16},    {"F32", at::kFloat},
    {"F64", at::kDouble},      {"C64", at::kComplexFloat}, {"F8_E5M2", at::kFloat8_e5m2},
    {"F8_E4M3", at::kFloat8_e4m3fn}, {"F8_E8M0", at::kFloat8_e8m0fnu},
};

}  // namespace

bool safetensors_dtype_from_name(const std::string& name, at::ScalarType* out) {
  for (const auto& entry : kDtypes)
    if (name == entry.name) {
      *out = entry.type;
      return true;
    }
  return false;
}

std::string safetensors_dtype_name(at::ScalarType dtype) {
  for (const auto& entry : kDtypes)
    if (entry.type == dtype) return entry.name;
  throw Error(fmt::format("safetensors cannot store tensors of dtype {}", c10::toString(dtype)),
              "convert the tensor to a supported dtype first");
}

}  // namespace wanfw
