#pragma once
// JSON from files wanfw did not write itself (safetensors headers, checkpoint indexes, trainer
// states): parsed with bounded nesting, and described in errors without serialising it back.

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace wanfw {

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
