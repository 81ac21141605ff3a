// The `wanfw` subcommands by name, each with its help.
#include "commands.hpp"

#include <cstdio>

#include "command_line.hpp"

namespace wanfw::cli {

namespace {
struct Command {
  const char* name;
  const char* help;
  int (*handler)(const std::vector<std::string>&);
};
const Command kCommands[] = {
    {"run", kRunHelp, run_command},
    {"validate", kValidateHelp, validate_command},
    {"predict", kPredictHelp, predict_command},
    {"sample", kSampleHelp, sample_command},
    {"export", kExportHelp, export_command},
    {"decode", kDecodeHelp, decode_command},
    {"model-info", kModelInfoHelp, model_info_command},
    {"plugins", kPluginsHelp, plugins_command},
    {"config-reference", kConfigReferenceHelp, config_reference_command},
    {"data", kDataHelp, data_command},
};
}  // namespace

std::optional<int> dispatch(const std::string& name, const std::vector<std::string>& args) {
  for (const Command& command : kCommands) {
    if (name != command.name) continue;
    if (wants_help(args)) {
      std::fputs(command.help, stdout);
      return kSuccess;
    }
    return command.handler(args);
  }
  return std::nullopt;
}

}  // namespace wanfw::cli
