#include "wanfw/io/bounded_input.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wanfw/error.hpp"

using nlohmann::json;

namespace wanfw {

std::filesystem::path confined_path(const std::filesystem::path& folder, const std::string& relative,
                                    const std::string& folder_name,
                                    const std::function<void(const std::string&)>& refuse) {
  constexpr std::size_t kMaxNameBytes = 255;  // the longest file name Linux file systems allow
  if (relative.empty()) refuse("an empty file name");
  if (relative.find('\0') != std::string::npos) refuse("a file name with a NUL byte");
  const std::filesystem::path path(relative);
  if (path.is_absolute()) refuse("an absolute path outside " + folder_name);
  for (const auto& part : path) {
    if (part == "..") refuse("a path that leaves " + folder_name);
    if (part.native().size() > kMaxNameBytes)
      refuse(fmt::format("a file name of {} bytes (the limit is {})", part.native().size(), kMaxNameBytes));
  }
  return folder / path;
}

std::string read_bounded_file(const std::filesystem::path& path, const std::string& what, std::uintmax_t max_bytes,
                              const std::function<void(const std::string&)>& fail) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status))
    fail(fmt::format("cannot read the {}: {}", what,
                     ec ? ec.message() : std::make_error_code(std::errc::no_such_file_or_directory).message()));
  if (!std::filesystem::is_regular_file(status)) fail("not a regular file");  // a folder, a pipe, a device
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(fmt::format("cannot read the {}: {}", what, ec.message()));
  if (size > max_bytes) fail(fmt::format("the {} has {} bytes; the limit is {}", what, size, max_bytes));
  std::ifstream in(path, std::ios::binary);
  std::string text(size, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size)) && !in.eof())
    fail(fmt::format("cannot read the {}: {}", what, std::strerror(errno)));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

std::string describe_json(const json& value) {
  switch (value.type()) {
    case json::value_t::array:
      return fmt::format("a list of {} item{}", value.size(), value.size() == 1 ? "" : "s");
    case json::value_t::object:
      return fmt::format("an object of {} key{}", value.size(), value.size() == 1 ? "" : "s");
    case json::value_t::string:
      return fmt::format("'{}'", shortened(value.get_ref<const std::string&>()));
    default:
      return shortened(value.dump());  // a number, true, false or null
  }
}

json parse_bounded_json(std::string_view text, int max_depth, const std::function<void(const std::string&)>& fail,
                        const std::function<void(const std::string&)>& on_top_level_key) {
  struct TooDeep {};
  try {
    return json::parse(text.begin(), text.end(), [&](int depth, json::parse_event_t event, json& parsed) {
      if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
          depth + 1 > max_depth)
        throw TooDeep{};
      if (depth == 1 && event == json::parse_event_t::key && on_top_level_key)
        on_top_level_key(parsed.get_ref<const std::string&>());
      return true;
    });
  } catch (const TooDeep&) {
    fail(fmt::format("nests lists and objects more than {} levels deep", max_depth));
  } catch (const json::exception& e) {
    fail(fmt::format("is not valid JSON: {}", shortened(e.what())));
  }
  throw Error("internal: a JSON failure callback returned");
}

}  // namespace wanfw
