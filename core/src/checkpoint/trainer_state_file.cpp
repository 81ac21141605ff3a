#include "checkpoint/trainer_state_file.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wanfw/io/bounded_input.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

namespace {

constexpr std::uintmax_t kMaxStateBytes = 64 << 20;  // a state with its config is a few KB
constexpr const char* kEdited = "the trainer state was edited or damaged; resume from an earlier checkpoint";

/// Integer field `key` of `object` (`fallback` where it is absent and one is given). Its JSON type
/// is checked before converting: a float such as 1e37 has no int64 value, and one above 2^63 - 1
/// none either.
std::int64_t integer(const json& object, const char* key, const fs::path& path,
                     std::optional<std::int64_t> fallback = std::nullopt) {
  if (fallback && !object.contains(key)) return *fallback;
  const json& value = object.at(key);
  const bool fits = value.is_number_integer() &&
                    (!value.is_number_unsigned() ||
                     value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
  if (!fits)
    throw FileError(fmt::format("{}: '{}' is {}, where a step count belongs (an integer)", path.string(), key,
                                describe_json(value)),
                    kEdited);
  return value.get<std::int64_t>();
}

/// The fields of trainer_state.json, each within its range.
TrainerState parse_state(const json& j, const fs::path& path) {
  TrainerState state;
  try {
    if (!j.is_object()) throw FileError(fmt::format("{}: is not a JSON object", path.string()), kEdited);
    state.step = integer(j, "step", path);
    state.epoch = integer(j, "epoch", path);
    state.batch_in_epoch = integer(j, "batch_in_epoch", path);
    state.samples_in_epoch = integer(j, "samples_in_epoch", path, -1);
    state.world_size = integer(j, "world_size", path);
    state.config_yaml = j.value("config", "");
    for (const auto& [key, value, least] : {std::tuple{"step", state.step, 0L},
                                            {"epoch", state.epoch, 0L},
                                            {"batch_in_epoch", state.batch_in_epoch, 0L},
                                            {"samples_in_epoch", state.samples_in_epoch, -1L},
                                            {"world_size", state.world_size, 1L}})
      if (value < least)
        throw FileError(fmt::format("{}: '{}' is {}, below its least value {}", path.string(), key, value, least),
                        kEdited);
    if (j.contains("loss_scaler")) {
      const json& scaler = j.at("loss_scaler");
      if (!scaler.is_object() || !scaler.at("scale").is_number())
        throw FileError(fmt::format("{}: the loss scaler is {}, not an object with a number 'scale'", path.string(),
                                    describe_json(scaler)),
                        kEdited);
      state.loss_scaler = LossScalerState{scaler.at("scale").get<double>(), integer(scaler, "growth_tracker", path)};
      if (!std::isfinite(state.loss_scaler->scale) || state.loss_scaler->scale <= 0)
        throw FileError(fmt::format("{}: the loss scale is {}, not a positive finite number", path.string(),
                                    state.loss_scaler->scale),
                        kEdited);
      if (state.loss_scaler->growth_tracker < 0)
        throw FileError(fmt::format("{}: the loss scaler's growth_tracker is {}; it counts steps and is never "
                                    "negative",
                                    path.string(), state.loss_scaler->growth_tracker),
                        kEdited);
    }
  } catch (const json::exception& e) {
    throw FileError(fmt::format("{}: malformed trainer state: {}", path.string(), shortened(e.what())), kEdited);
  }
  return state;
}

}  // namespace

TrainerState read_trainer_state(const fs::path& path) {
  const auto fail = [&](const std::string& problem) {
    throw FileError(fmt::format("{}: {}", path.string(), problem), kEdited);
  };
  return parse_state(parse_bounded_json(read_bounded_file(path, "trainer state", kMaxStateBytes, fail), 8, fail), path);
}

}  // namespace wanfw
