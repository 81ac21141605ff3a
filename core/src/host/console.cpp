#include "host/console.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

namespace wanfw {

namespace {

/// Routes each record by level: below warn to stdout, warn and above to stderr.
class SplitConsoleSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::FILE* stream = msg.level >= spdlog::level::warn ? stderr : stdout;
    std::fwrite(line.data(), 1, line.size(), stream);
    std::fflush(stream);
  }
  void flush_() override {
    std::fflush(stdout);
    std::fflush(stderr);
  }
};

}  // namespace

void install_console_logger() {
  auto logger = std::make_shared<spdlog::logger>("wanfw", std::make_shared<SplitConsoleSink>());
  spdlog::set_default_logger(logger);
  configure_console("info", 0);
}

void configure_console(const std::string& level, int rank) {
  spdlog::set_pattern(rank == 0 ? "[%H:%M:%S] [%l] %v" : fmt::format("[%H:%M:%S] [rank {}] [%l] %v", rank));
  spdlog::level::level_enum chosen = spdlog::level::from_str(level);
  const char* all = std::getenv("WANFW_LOG_ALL_RANKS");
  if (rank != 0 && !(all && std::string(all) == "1")) chosen = std::max(chosen, spdlog::level::warn);
  spdlog::set_level(chosen);
}

}  // namespace wanfw
