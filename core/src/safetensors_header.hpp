#pragma once
// The JSON header of a safetensors file, parsed and checked against the data area it describes.
// Bounded: nesting, key counts and the text shown in errors stay small whatever the file holds.

#include <cstdint>
#include <functional>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "wanfw/safetensors.hpp"

namespace wanfw {

/// What a safetensors header says: the tensors in header order and `__metadata__`.
struct SafetensorsHeader {
  std::vector<TensorRecord> records;
  std::map<std::string, std::string> metadata;
};

/// Parses and validates the header `text` of `path`, whose data area holds `data_size` bytes:
/// JSON (nested at most a few levels), duplicate names, dtypes, shapes (element counts and
/// strides that fit in 64 bits), offsets, and that the tensors tile the data area exactly.
/// Throws FileError naming the file and the tensor at fault.
SafetensorsHeader parse_safetensors_header(std::string_view text, std::uint64_t data_size,
                                           const std::filesystem::path& path);

/// Parses JSON `text` nested at most `max_depth` levels: deeper input is refused before it is
/// built, so nothing downstream recurses through it. On failure calls `fail` with the problem
/// ("is not valid JSON: ...", "nests ... deep"), which must throw. `on_top_level_key`, when
/// given, sees every key of the outer object as it is read (duplicates included).
nlohmann::json parse_bounded_json(std::string_view text, int max_depth,
                                  const std::function<void(const std::string&)>& fail,
                                  const std::function<void(const std::string&)>& on_top_level_key = {});

/// A JSON value as an error message shows it: scalars as written (shortened), a list or an
/// object by its size; never recursive.
std::string describe_json(const nlohmann::json& value);

}  // namespace wanfw
