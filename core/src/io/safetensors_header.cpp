#include "io/safetensors_header.hpp"

#include <algorithm>
#include <climits>
#include <set>

#include <c10/core/ScalarType.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/safetensors_dtypes.hpp"
#include "wanfw/io/bounded_input.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

namespace {

constexpr int kMaxHeaderDepth = 8;  // a header needs 3: header, tensor entry, shape
constexpr std::size_t kMaxDims = 64;

std::uint64_t as_u64(const json& value, const fs::path& path, const std::string& tensor, const char* field) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) return value.get<std::uint64_t>();
  malformed_safetensors(path, fmt::format("'{}' holds {}, not a non-negative integer", field, describe_json(value)),
                        tensor);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return shortened(text + "]");
}

TensorRecord tensor_record(const std::string& name, const json& entry, std::uint64_t data_size, const fs::path& path) {
  if (!entry.is_object())
    malformed_safetensors(path, fmt::format("its entry is {}, not an object", describe_json(entry)), name);
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field)) malformed_safetensors(path, fmt::format("its entry has no '{}'", field), name);
  TensorRecord record;
  record.name = name;
  const json& dtype = entry["dtype"];
  if (!dtype.is_string())
    malformed_safetensors(path, fmt::format("'dtype' is {}, not a string", describe_json(dtype)), name);
  record.dtype_name = dtype.get<std::string>();
  if (!safetensors_dtype_from_name(record.dtype_name, &record.dtype))
    malformed_safetensors(path, fmt::format("unknown dtype '{}'", shortened(record.dtype_name)), name);

  const json& shape = entry["shape"];
  if (!shape.is_array())
    malformed_safetensors(path, fmt::format("'shape' is {}, not a list", describe_json(shape)), name);
  if (shape.size() > kMaxDims)
    malformed_safetensors(
        path, fmt::format("'shape' has {} dimensions; at most {} are supported", shape.size(), kMaxDims), name);
  // LibTorch lays a tensor out with strides that are products of the sizes (a size 0 counting
  // as 1), in elements and in bytes: both must fit in 64 bits, whatever the element count.
  const auto element_size = static_cast<std::uint64_t>(c10::elementSize(record.dtype));
  std::uint64_t numel = 1;
  std::uint64_t stride_bytes = element_size;
  for (const json& dim : shape) {
    const std::uint64_t d = as_u64(dim, path, name, "shape");
    if (d > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, d, &numel) ||
        __builtin_mul_overflow(stride_bytes, std::max<std::uint64_t>(d, 1), &stride_bytes) ||
        stride_bytes > static_cast<std::uint64_t>(INT64_MAX))
      malformed_safetensors(path, "the shape overflows: its sizes multiply beyond 64 bits", name);
    record.shape.push_back(static_cast<std::int64_t>(d));
  }

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    malformed_safetensors(path, fmt::format("'data_offsets' is {}, not a pair", describe_json(offsets)), name);
  record.begin = as_u64(offsets[0], path, name, "data_offsets");
  record.end = as_u64(offsets[1], path, name, "data_offsets");
  if (record.begin > record.end || record.end > data_size)
    malformed_safetensors(
        path,
        fmt::format("data_offsets [{}, {}] lie outside the {}-byte data area", record.begin, record.end, data_size),
        name);
  const std::uint64_t nbytes = numel * element_size;  // <= stride_bytes, so it fits
  if (nbytes != record.end - record.begin)
    malformed_safetensors(path,
                          fmt::format("data_offsets span {} bytes but shape {} of {} needs {}",
                                      record.end - record.begin, shape_text(record.shape), record.dtype_name, nbytes),
                          name);
  return record;
}

}  // namespace

void malformed_safetensors(const fs::path& path, const std::string& what, const std::string& tensor) {
  const std::string where =
      tensor.empty() ? path.string() : fmt::format("{} (tensor '{}')", path.string(), shortened(tensor));
  throw FileError(fmt::format("{}: not a valid safetensors file: {}", where, what),
                  "the file is truncated or corrupt; re-download or re-create it (for a checkpoint, resume from "
                  "an earlier one)");
}

SafetensorsHeader parse_safetensors_header(std::string_view text, std::uint64_t data_size, const fs::path& path) {
  if (text.empty() || text.front() != '{') malformed_safetensors(path, "the header does not start with '{'");
  std::set<std::string> seen;
  std::string duplicate;
  json document = parse_bounded_json(
      text, kMaxHeaderDepth, [&](const std::string& problem) { malformed_safetensors(path, "the header " + problem); },
      [&](const std::string& key) {
        if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
      });
  if (!duplicate.empty()) malformed_safetensors(path, "the header names this tensor twice", duplicate);
  if (!document.is_object()) malformed_safetensors(path, "the header is not a JSON object");

  SafetensorsHeader header;
  for (const auto& [name, entry] : document.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        malformed_safetensors(path, fmt::format("__metadata__ is {}, not an object", describe_json(entry)));
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          malformed_safetensors(path, fmt::format("__metadata__ value of '{}' is {}, not a string", shortened(key),
                                                  describe_json(value)));
        header.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    header.records.push_back(tensor_record(name, entry, data_size, path));
  }

  // The data area must be covered exactly: no holes, no overlaps, nothing left over.
  std::vector<const TensorRecord*> order;
  for (const auto& r : header.records) order.push_back(&r);
  std::sort(order.begin(), order.end(), [](const TensorRecord* a, const TensorRecord* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t cursor = 0;
  for (const TensorRecord* r : order) {
    if (r->begin != cursor)
      malformed_safetensors(path,
                            r->begin < cursor
                                ? fmt::format("its bytes overlap the previous tensor's (offset {})", r->begin)
                                : fmt::format("there is a gap in the data area before offset {}", r->begin),
                            r->name);
    cursor = r->end;
  }
  if (cursor != data_size)
    malformed_safetensors(
        path, fmt::format("the tensors cover {} of the {} data bytes (truncated or trailing data)", cursor, data_size));
  return header;
}

}  // namespace wanfw
