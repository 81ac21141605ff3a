#include "checkpoint/trainer_state_file.hpp"

#include <cmath>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wanfw/bounded_input.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

namespace {

constexpr std::uintmax_t kMaxStateBytes = 64 << 20;  // a state with its config is a few KB
constexpr const char* kEdited = "the trainer state was edited or damaged; resume from an earlier checkpoint";

/// The fields of trainer_state.json, each within its range.
TrainerState parse_state(const json& j, const fs::path& path) {
  TrainerState state;
  try {
    state.step = j.at("step").get<std::int64_t>();
    state.epoch = j.at("epoch").get<std::int64_t>();
    state.batch_in_epoch = j.at("batch_in_epoch").get<std::int64_t>();
    state.samples_in_epoch = j.value("samples_in_epoch", std::int64_t{-1});
    state.world_size = j.at("world_size").get<std::int64_t>();
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
      state.loss_scaler = LossScalerState{j["loss_scaler"].at("scale").get<double>(),
                                          j["loss_scaler"].at("growth_tracker").get<std::int64_t>()};
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
