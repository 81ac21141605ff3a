#include "wanfw/error.hpp"

#include <fmt/format.h>

namespace wanfw {

std::string SourceLocation::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

std::string shortened(std::string_view text) {
  constexpr std::size_t kShown = 60;
  if (text.size() <= kShown) return std::string(text);
  return fmt::format("{}... ({} characters)", text.substr(0, kShown), text.size());
}

static std::string compose(const std::string& problem, const std::string& hint) {
  return hint.empty() ? problem : problem + "\n  hint: " + hint;
}

Error::Error(const std::string& problem, const std::string& hint)
    : std::runtime_error(compose(problem, hint)) {}

ConfigError::ConfigError(const SourceLocation& where, const std::string& problem, const std::string& hint)
    : Error(where.file.empty() ? problem : where.str() + ": " + problem, hint) {}

}  // namespace wanfw
