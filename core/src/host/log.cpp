#include "wanfw/log.hpp"

#include <spdlog/spdlog.h>

namespace wanfw::log {

namespace {
spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::Debug: return spdlog::level::debug;
    case Level::Info: return spdlog::level::info;
    case Level::Warning: return spdlog::level::warn;
    case Level::Error: return spdlog::level::err;
  }
  return spdlog::level::info;
}
}  // namespace

bool enabled(Level level) { return spdlog::default_logger_raw()->should_log(to_spdlog(level)); }

void write(Level level, std::string_view message) {
  spdlog::default_logger_raw()->log(to_spdlog(level), "{}", message);
}

}  // namespace wanfw::log
