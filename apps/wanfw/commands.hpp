#pragma once
// The `wanfw` subcommands. Each returns the process exit code.

#include <optional>
#include <string>
#include <vector>

namespace wanfw::cli {

/// 0: success, 1: failure while running, 2: bad usage or configuration.
enum ExitCode : int { kSuccess = 0, kFailure = 1, kBadUsage = 2 };

// Each command with its help text: run_commands.cpp, evaluate_commands.cpp, plugin_commands.cpp,
// data_commands.cpp (its help: data_help.cpp).
int run_command(const std::vector<std::string>& args);
int validate_command(const std::vector<std::string>& args);
int predict_command(const std::vector<std::string>& args);
int sample_command(const std::vector<std::string>& args);
int export_command(const std::vector<std::string>& args);
int decode_command(const std::vector<std::string>& args);
int model_info_command(const std::vector<std::string>& args);
int plugins_command(const std::vector<std::string>& args);
int config_reference_command(const std::vector<std::string>& args);
/// `wanfw data synth|inspect|verify` (data_commands.cpp).
int data_command(const std::vector<std::string>& args);
extern const char* const kRunHelp;
extern const char* const kValidateHelp;
extern const char* const kModelInfoHelp;
extern const char* const kPredictHelp;
extern const char* const kSampleHelp;
extern const char* const kExportHelp;
extern const char* const kDecodeHelp;
extern const char* const kPluginsHelp;
extern const char* const kConfigReferenceHelp;
extern const char* const kDataHelp;

/// Runs the subcommand `name` (printing its help for --help/-h); nothing if there is no such
/// subcommand.
std::optional<int> dispatch(const std::string& name, const std::vector<std::string>& args);

}  // namespace wanfw::cli
