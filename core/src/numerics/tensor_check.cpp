#include "wanfw/io/tensor_check.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>

#include "numerics/finite_copy.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

namespace {

const char* kDamaged = "the file was edited or damaged: write it again, or resume from an earlier checkpoint";

std::string kind_of(at::ScalarType dtype) {
  if (at::isComplexType(dtype)) return fmt::format("complex values ({})", c10::toString(dtype));
  if (dtype == at::kBool) return "booleans";
  if (at::isFloatingType(dtype)) return fmt::format("floating-point values ({})", c10::toString(dtype));
  return fmt::format("integers ({})", c10::toString(dtype));
}

bool allowed(at::ScalarType dtype, TensorRole::Values values) {
  switch (values) {
    case TensorRole::Values::RealFloating:
      return at::isFloatingType(dtype) && !at::isComplexType(dtype);
    case TensorRole::Values::Integer:
      return at::isIntegralType(dtype, /*includeBool=*/false);
    case TensorRole::Values::RealOrInteger:
      return at::isIntegralType(dtype, /*includeBool=*/false) ||
             (at::isFloatingType(dtype) && !at::isComplexType(dtype));
    case TensorRole::Values::Bytes:
      return dtype == at::kByte;
  }
  return false;
}

const char* expected_kind(TensorRole::Values values) {
  switch (values) {
    case TensorRole::Values::RealFloating:
      return "real floating-point values (F32, BF16, F16 or F64)";
    case TensorRole::Values::Integer:
      return "integers";
    case TensorRole::Values::RealOrInteger:
      return "real numbers (floating-point or integer)";
    case TensorRole::Values::Bytes:
      return "bytes (U8)";
  }
  return "";
}

/// "[2, 0, 17] = nan" for the first element of `bad` (a boolean mask of `tensor`'s shape).
std::string first_element(const at::Tensor& tensor, const at::Tensor& bad) {
  const at::Tensor flat_index = bad.reshape(-1).nonzero().select(1, 0).min();
  std::int64_t rest = flat_index.item<std::int64_t>();
  std::vector<std::int64_t> index(static_cast<std::size_t>(tensor.dim()));
  for (std::int64_t d = tensor.dim() - 1; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = rest % tensor.size(d);
    rest /= tensor.size(d);
  }
  const double value = tensor.reshape(-1)[flat_index.item<std::int64_t>()].item<double>();
  return fmt::format("[{}] = {}", fmt::join(index, ", "), value);
}

}  // namespace

TensorRole TensorRole::weight() { return {"a weight", Values::RealFloating, true, false, kDamaged}; }
TensorRole TensorRole::data() {
  return {"data", Values::RealFloating, true, false,
          "encode the data again (tools/encode_dataset.py) or remove the sample; wanfw data verify names every "
          "such sample"};
}
TensorRole TensorRole::first_moment() { return {"an optimizer moment", Values::RealFloating, true, false, kDamaged}; }
TensorRole TensorRole::second_moment() {
  return {"an optimizer second moment", Values::RealFloating, true, true, kDamaged};
}
TensorRole TensorRole::step_count() { return {"an optimizer step count", Values::Integer, true, true, kDamaged}; }
TensorRole TensorRole::generator_state() { return {"a generator state", Values::Bytes, true, false, kDamaged}; }
TensorRole TensorRole::input() {
  return {"an input", Values::RealOrInteger, true, false, "write the inputs again with finite real values"};
}

namespace {

/// The checks of check_tensor on everything but the values.
std::string check_kind_and_shape(const at::Tensor& tensor, const TensorRole& role, const std::filesystem::path& file,
                                 std::string_view name, const std::optional<std::vector<std::int64_t>>& shape) {
  std::string where = fmt::format("{}: tensor '{}'", file.string(), name);
  if (!allowed(tensor.scalar_type(), role.values))
    throw FileError(fmt::format("{} holds {}; {} holds {}", where, kind_of(tensor.scalar_type()), role.what,
                                expected_kind(role.values)),
                    role.hint);
  if (shape && tensor.sizes() != at::IntArrayRef(*shape))
    throw FileError(fmt::format("{} has shape {}; {} here has shape {}", where, c10::str(tensor.sizes()), role.what,
                                c10::str(at::IntArrayRef(*shape))),
                    role.hint);
  return where;
}

void check_values(const at::Tensor& tensor, const TensorRole& role, const std::string& where, bool known_finite) {
  if (tensor.numel() == 0) return;
  const bool floating = at::isFloatingType(tensor.scalar_type());
  if (floating && role.finite && !known_finite && !all_finite(tensor)) {
    const at::Tensor bad = at::isfinite(tensor).logical_not();
    const std::int64_t count = bad.sum().item<std::int64_t>();
    throw FileError(
        fmt::format("{} holds {} {} NaN or infinite, the first at {}; {} must be finite", where, count,
                    count == 1 ? "value that is" : "values that are", first_element(tensor, bad), role.what),
        role.hint);
  }
  if (role.nonnegative && tensor.min().item<double>() < 0) {
    const at::Tensor bad = tensor.lt(0);
    const std::int64_t count = bad.sum().item<std::int64_t>();
    throw FileError(fmt::format("{} holds {} negative {}, the first at {}; {} is never negative", where, count,
                                count == 1 ? "value" : "values", first_element(tensor, bad), role.what),
                    role.hint);
  }
}

}  // namespace

void check_tensor(const at::Tensor& tensor, const TensorRole& role, const std::filesystem::path& file,
                  std::string_view name, std::optional<std::vector<std::int64_t>> shape) {
  check_values(tensor, role, check_kind_and_shape(tensor, role, file, name, shape), false);
}

void copy_checked(const at::Tensor& destination, const at::Tensor& source, const TensorRole& role,
                  const std::filesystem::path& file, std::string_view name) {
  const std::string where = check_kind_and_shape(source, role, file, name, destination.sizes().vec());
  at::NoGradGuard no_grad;
  if (destination.device().is_cpu() && destination.is_contiguous() && source.is_contiguous() &&
      at::isFloatingType(source.scalar_type())) {
    at::Tensor target = destination;
    const bool finite = copy_finite(target, source);
    // A bad value found in the copy is reported from the source, with its index and value.
    check_values(source, role, where, finite || !role.finite);
    return;
  }
  check_values(source, role, where, false);
  destination.copy_(source);
}

at::Tensor read_checked(const at::Tensor& source, const TensorRole& role, const std::filesystem::path& file,
                        std::string_view name, std::optional<at::ScalarType> dtype) {
  at::Tensor out = at::empty(source.sizes(), at::TensorOptions(dtype.value_or(source.scalar_type())));
  copy_checked(out, source, role, file, name);
  return out;
}

}  // namespace wanfw
