// `wanfw run`, `validate` and `model-info`: an experiment from its config.
#include <cstdio>
#include <map>
#include <string>

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

const char* const kModelInfoHelp = R"(usage: wanfw model-info CONFIG [--gpus N] [--set key=value]...

Prints the config's model as its plugin describes it without building it: dimensions, parameter
count and a memory estimate: per GPU for the config's strategy on N GPUs (default 1), its
sequence-parallel size, batch and largest bucket. Allocates no weights, so it works for models
larger than memory.
)";

int run_command(const std::vector<std::string>& args) {
  const RunOutcome outcome = run_experiment(parse_run_request(args, true, kRunHelp));
  return outcome.stop_signal == 0 ? kSuccess : kFailure;
}

int validate_command(const std::vector<std::string>& args) {
  std::fputs(validate_experiment(parse_run_request(args, false, kValidateHelp)).c_str(), stdout);
  return kSuccess;
}

int model_info_command(const std::vector<std::string>& args) {
  std::map<std::string, std::string> named{{"--gpus", "1"}};
  const RunRequest request = parse_run_request(args, false, kModelInfoHelp, &named);
  const std::string& gpus = named["--gpus"];
  if (gpus.empty() || gpus.find_first_not_of("0123456789") != std::string::npos || gpus.size() > 6 ||
      std::stoi(gpus) < 1)
    usage_error("--gpus needs a positive number", kModelInfoHelp);
  std::fputs(inspect_model(request, std::stoi(gpus)).c_str(), stdout);
  return kSuccess;
}

}  // namespace wanfw::cli
