#pragma once
// The JSON header of a safetensors file, parsed and checked against the data area it describes.
// Bounded: nesting, key counts and the text shown in errors stay small whatever the file holds.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "wanfw/io/safetensors.hpp"

namespace wanfw {

/// What a safetensors header says: the tensors in header order and `__metadata__`.
struct SafetensorsHeader {
  std::vector<TensorRecord> records;
  std::map<std::string, std::string> metadata;
};

/// Throws the FileError for a malformed safetensors file: "<path> (tensor '<tensor>'): not a valid
/// safetensors file: <what>", with what to do about it.
[[noreturn]] void malformed_safetensors(const std::filesystem::path& path, const std::string& what,
                                        const std::string& tensor = "");

/// Parses and validates the header `text` of `path`, whose data area holds `data_size` bytes:
/// JSON (nested at most a few levels), duplicate names, dtypes, shapes (element counts and
/// strides that fit in 64 bits), offsets, and that the tensors tile the data area exactly.
/// Throws FileError naming the file and the tensor at fault.
SafetensorsHeader parse_safetensors_header(std::string_view text, std::uint64_t data_size,
                                           const std::filesystem::path& path);

}  // namespace wanfw
