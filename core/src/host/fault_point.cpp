#include "host/fault_point.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "wanfw/error.hpp"

namespace wanfw {

namespace {

constexpr std::string_view kPoints[] = {"step-forward",      "step-gradients",   "step-optimizer",
                                        "checkpoint-pieces", "checkpoint-index", "checkpoint-rename"};

struct Fault {
  std::string point;
  std::optional<int> rank;
  std::optional<std::int64_t> step;
  int signal = SIGKILL;
  std::string signal_name = "KILL";
};

/// One `key=value` of WANFW_FAULT into `fault`; false when it is none of those it takes.
bool parse_setting(const std::string& part, Fault& fault) {
  const auto equals = part.find('=');
  if (equals == std::string::npos) return false;
  const std::string key = part.substr(0, equals), value = part.substr(equals + 1);
  std::size_t used = 0;
  try {
    if (key == "rank") fault.rank = std::stoi(value, &used);
    if (key == "step") fault.step = std::stoll(value, &used);
  } catch (const std::exception&) {
    return false;
  }
  if (key == "rank" || key == "step") return !value.empty() && used == value.size();
  if (key != "signal" || (value != "KILL" && value != "TERM" && value != "STOP")) return false;
  fault.signal = value == "KILL" ? SIGKILL : value == "TERM" ? SIGTERM : SIGSTOP;
  fault.signal_name = value;
  return true;
}

Fault parse_fault(const std::string& text) {
  Fault fault;
  std::istringstream parts(text);
  std::string part;
  std::getline(parts, fault.point, ',');
  if (std::find(std::begin(kPoints), std::end(kPoints), fault.point) == std::end(kPoints))
    throw Error(fmt::format("WANFW_FAULT='{}': no point '{}'; the points are {}", text, fault.point,
                            fmt::join(kPoints, ", ")),
                "unset WANFW_FAULT (it exists for the reliability tests)");
  while (std::getline(parts, part, ','))
    if (!parse_setting(part, fault))
      throw Error(fmt::format("WANFW_FAULT='{}': '{}' is not rank=R, step=N or signal=KILL|TERM|STOP", text, part),
                  "unset WANFW_FAULT (it exists for the reliability tests)");
  return fault;
}

const std::optional<Fault>& configured_fault() {
  static const std::optional<Fault> fault = [] {
    const char* text = std::getenv("WANFW_FAULT");
    return text == nullptr || *text == '\0' ? std::nullopt : std::optional<Fault>(parse_fault(text));
  }();
  return fault;
}

}  // namespace

void check_fault_setting() { configured_fault(); }

void fault_point(std::string_view point, int rank, std::int64_t step) {
  const std::optional<Fault>& fault = configured_fault();
  if (!fault || fault->point != point || (fault->rank && *fault->rank != rank) || (fault->step && *fault->step != step))
    return;
  spdlog::warn("WANFW_FAULT: rank {} sends itself SIG{} at {} (step {})", rank, fault->signal_name, point, step);
  spdlog::default_logger()->flush();
  std::raise(fault->signal);
}

}  // namespace wanfw
