#pragma once
// Console logging: spdlog's default logger writes info and below to stdout, warnings and errors
// to stderr, each line flushed.

#include <string>

namespace wanfw {

/// Installs the console logger as spdlog's default. Called once by the command line.
void install_console_logger();
/// Sets the level ("info", "debug", ...) and the line prefix. Only rank 0 speaks: other ranks
/// log warnings and errors only (with their rank in the prefix), unless WANFW_LOG_ALL_RANKS=1.
void configure_console(const std::string& level, int rank);

}  // namespace wanfw
