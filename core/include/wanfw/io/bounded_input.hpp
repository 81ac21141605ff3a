#pragma once
// Input wanfw did not write itself (configs, safetensors headers, checkpoint indexes, trainer
// states, data set manifests), read within bounds: files checked before they are read, JSON
// parsed with bounded nesting and described in errors without being serialised back. Part of the
// SDK for plugins that read files of their own (the latent_shards data set reads its manifest
// with it); a plugin that includes this header also needs nlohmann_json's headers
// (find_package(nlohmann_json) and its nlohmann_json::nlohmann_json target).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace wanfw {

/// The whole of `path`, the `what` ("config file", "index"), which must be a regular file of at
/// most `max_bytes`: checked before anything is read, so a pipe, a device or a huge file costs
/// nothing. On failure calls `fail` with the problem ("not a regular file", "the index has N
/// bytes; the limit is M", "cannot read the index: <reason>"), which must throw.
std::string read_bounded_file(const std::filesystem::path& path, const std::string& what, std::uintmax_t max_bytes,
                              const std::function<void(const std::string&)>& fail);

/// Parses JSON `text` nested at most `max_depth` levels: deeper input is refused before it is
/// built, so nothing downstream recurses through it. On failure calls `fail` with the problem
/// ("is not valid JSON: ...", "nests ... deep"), which must throw. `on_top_level_key`, when
/// given, sees every key of the outer object as it is read (duplicates included).
nlohmann::json parse_bounded_json(std::string_view text, int max_depth,
                                  const std::function<void(const std::string&)>& fail,
                                  const std::function<void(const std::string&)>& on_top_level_key = {});

/// `relative`, a file name an untrusted file gave, below `folder`: a relative path with no `..`,
/// no NUL byte, every component a valid file name (at most 255 bytes). Otherwise calls `refuse`
/// with why ("a path that leaves <folder_name>", folder_name being "the index's folder", say),
/// which must throw.
std::filesystem::path confined_path(const std::filesystem::path& folder, const std::string& relative,
                                    const std::string& folder_name,
                                    const std::function<void(const std::string&)>& refuse);

/// A JSON value as an error message shows it: scalars as written (shortened), a list or an
/// object by its size; never recursive.
std::string describe_json(const nlohmann::json& value);

}  // namespace wanfw
