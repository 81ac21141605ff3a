#pragma once
// Logging for plugins, through wanfw's console: the same format, levels and rank rules as the
// host's own lines (rank 0 speaks; other ranks log warnings and errors, prefixed with their rank).
// No spdlog or fmt in the plugin: arguments are joined with operator<<.
//
//   wanfw::log::info("local_sgd: averaging every ", every, " steps");
//   throw wanfw::Error(wanfw::str("rank ", rank, " lost"));

#include <sstream>
#include <string>
#include <string_view>

namespace wanfw {

/// The arguments written one after another, as std::ostream's operator<< writes them.
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

namespace log {

enum class Level { Debug, Info, Warning, Error };

/// Whether a line of `level` would be printed (run.log_level, and the rank rule).
bool enabled(Level level);
/// Writes one line; safe from any thread.
void write(Level level, std::string_view message);

template <typename... Parts>
void debug(const Parts&... parts) {
  if (enabled(Level::Debug)) write(Level::Debug, str(parts...));
}
template <typename... Parts>
void info(const Parts&... parts) {
  if (enabled(Level::Info)) write(Level::Info, str(parts...));
}
template <typename... Parts>
void warn(const Parts&... parts) {
  if (enabled(Level::Warning)) write(Level::Warning, str(parts...));
}
template <typename... Parts>
void error(const Parts&... parts) {
  if (enabled(Level::Error)) write(Level::Error, str(parts...));
}

}  // namespace log
}  // namespace wanfw
