#pragma once
// Errors a user can act on: what went wrong, where, and what to do about it.

#include <stdexcept>
#include <string>
#include <string_view>

namespace wanfw {

/// A position in a configuration source: a YAML file (line and column are 1-based) or a
/// command-line override such as `--set trainer.lr=1e-4` (line and column are 0).
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;

  /// "file:line:column", or just "file" when the position is unknown.
  std::string str() const;
};

/// A value as an error message shows it: at most 60 characters, and how long it really is
/// ("qqqq... (1000000 characters)"), so that a huge value never floods the terminal.
std::string shortened(std::string_view text);

/// Base of every wanfw error. `what()` is the full message a user sees.
class Error : public std::runtime_error {
 public:
  /// `problem`: what went wrong; `hint`: what to do about it (may be empty).
  explicit Error(const std::string& problem, const std::string& hint = "");
};

/// The configuration or the command line is wrong (the CLI exits with code 2).
class ConfigError : public Error {
 public:
  /// "<where>: <problem>"; a location without a file (a value with no source) adds nothing.
  ConfigError(const SourceLocation& where, const std::string& problem, const std::string& hint = "");
  using Error::Error;
};

/// A plugin could not be found, loaded, or accepted (the CLI exits with code 2).
class PluginError : public Error {
  using Error::Error;
};

/// A file (checkpoint, safetensors, CSV) is missing, malformed, or could not be written.
class FileError : public Error {
  using Error::Error;
};

/// One sample of a data set cannot be used: unreadable, corrupt, or not what the model declared.
/// The message names the sample and its file; `data.on_bad_sample: skip` skips such samples.
class DataError : public Error {
  using Error::Error;
};

/// Training stopped because a loss or gradient stopped being finite.
class NonFiniteError : public Error {
  using Error::Error;
};

}  // namespace wanfw
