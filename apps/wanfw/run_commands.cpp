// `wanfw run`, `validate` and `model-info`: an experiment from its config.
#include <cctype>
#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>

#include "command_line.hpp"
#include "commands.hpp"
#include "run/experiment.hpp"
#include "run/inspection.hpp"

namespace wanfw::cli {

const char* const kRunHelp = R"(usage: wanfw run CONFIG [--set key=value]... [--resume auto|PATH]

Trains the experiment described by CONFIG (YAML).

  --set key.path=value   override one config value (parsed as YAML); repeatable
  --resume auto          continue the run from its newest complete checkpoint
                         (starts a new run if there is none)
  --resume PATH          continue from a checkpoint folder or a run folder

Multi-process runs start through torchrun or srun, e.g.
  torchrun --no-python --nproc-per-node=2 wanfw run CONFIG
)";

const char* const kValidateHelp = R"(usage: wanfw validate CONFIG [--set key=value]...

Loads the config and every plugin it names, checks every option, builds the model and the data
set, and prints the resolved config. Trains nothing. Exits 2 on any problem.
)";

const char* const kModelInfoHelp = R"(usage: wanfw model-info CONFIG [--gpus N] [--fit SIZE [--host-ram SIZE]] [--set key=value]...

Prints the config's model as its plugin describes it without building it: dimensions, parameter
count and a memory estimate: per GPU for the config's strategy on N GPUs (default 1), its
sequence-parallel size, batch and largest bucket, and (LoRA runs) a memory plan of device and
host bytes with and without each low-memory option. Allocates no weights, so it works for models
larger than memory.

  --fit SIZE       the device memory per GPU ("24GB", "12GiB"): the plan picks the fp8 base,
                   gradient checkpointing, activation offload and the fewest swapped blocks that
                   fit, and prints the settings to put in the YAML
  --host-ram SIZE  with --fit: the host memory per rank the plan may use as well
)";

/// "24GB" (10^9 bytes), "12GiB" (2^30), "64G" (as GB); 0 for an empty text.
double memory_size(const std::string& text, const char* flag) {
  if (text.empty()) return 0;
  std::size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  std::string unit = text.substr(end);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const double scale = unit == "GIB" ? 1024.0 * 1024.0 * 1024.0 : (unit == "GB" || unit == "G") ? 1e9 : 0;
  if (end == 0 || scale == 0 || !(value > 0))
    usage_error(fmt::format("{} needs a size such as 24GB or 12GiB, not '{}'", flag, text), kModelInfoHelp);
  return value * scale;
}

int run_command(const std::vector<std::string>& args) {
  const RunOutcome outcome = run_experiment(parse_run_request(args, true, kRunHelp));
  return outcome.stop_signal == 0 ? kSuccess : kFailure;
}

int validate_command(const std::vector<std::string>& args) {
  std::fputs(validate_experiment(parse_run_request(args, false, kValidateHelp)).c_str(), stdout);
  return kSuccess;
}

int model_info_command(const std::vector<std::string>& args) {
  std::map<std::string, std::string> named{{"--gpus", "1"}, {"--fit", ""}, {"--host-ram", ""}};
  const RunRequest request = parse_run_request(args, false, kModelInfoHelp, &named);
  const std::string& gpus = named["--gpus"];
  if (gpus.empty() || gpus.find_first_not_of("0123456789") != std::string::npos || gpus.size() > 6 ||
      std::stoi(gpus) < 1)
    usage_error("--gpus needs a positive number", kModelInfoHelp);
  InspectRequest inspect;
  inspect.gpus = std::stoi(gpus);
  inspect.fit_device_bytes = memory_size(named["--fit"], "--fit");
  inspect.fit_host_bytes = memory_size(named["--host-ram"], "--host-ram");
  if (inspect.fit_host_bytes > 0 && inspect.fit_device_bytes == 0)
    usage_error("--host-ram goes with --fit", kModelInfoHelp);
  std::fputs(inspect_model(request, inspect).c_str(), stdout);
  return kSuccess;
}

}  // namespace wanfw::cli
