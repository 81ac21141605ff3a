#include "bounded_json.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wanfw/error.hpp"

using nlohmann::json;

namespace wanfw {

std::string describe_json(const json& value) {
  switch (value.type()) {
    case json::value_t::array: return fmt::format("a list of {} item{}", value.size(), value.size() == 1 ? "" : "s");
    case json::value_t::object: return fmt::format("an object of {} key{}", value.size(), value.size() == 1 ? "" : "s");
    case json::value_t::string: return fmt::format("'{}'", shortened(value.get_ref<const std::string&>()));
    default: return shortened(value.dump());  // a number, true, false or null
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
