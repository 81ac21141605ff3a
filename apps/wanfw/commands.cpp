#include "commands.hpp"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "wanfw/error.hpp"
#include "config.hpp"
#include "experiment.hpp"
#include "plugin_host.hpp"

namespace wanfw::cli {

namespace {

const char* kRunHelp = R"(usage: wanfw run CONFIG [--set key=value]... [--resume auto|PATH]

Trains the experiment described by CONFIG (YAML).

  --set key.path=value   override one config value (parsed as YAML); repeatable
  --resume auto          continue the run from its newest complete checkpoint
                         (starts a new run if there is none)
  --resume PATH          continue from a checkpoint folder or a run folder

Multi-process runs start through torchrun or srun, e.g.
  torchrun --no-python --nproc-per-node=2 wanfw run CONFIG
)";

const char* kValidateHelp = R"(usage: wanfw validate CONFIG [--set key=value]...

Loads the config and every plugin it names, checks every option, builds the model and the data
set, and prints the resolved config. Trains nothing. Exits 2 on any problem.
)";

const char* kPredictHelp = R"(usage: wanfw predict CONFIG --inputs IN.safetensors --out OUT.safetensors
                     [--checkpoint PATH] [--set key=value]...

Builds the config's model (with its weights) on the strategy's device and runs it once, without
gradients, on the tensors in IN; writes what the model returns to OUT. For the Wan model: x
[B,C,F,H,W] (noisy latents), t [B] or [B,tokens] (0..1000), context [B,L,text_dim] -> v.

  --checkpoint PATH   take the weights from a training checkpoint (a <run>/checkpoints/step-*
                      folder, or a run folder for its newest one) instead of the config's
)";

const char* kSampleHelp = R"(usage: wanfw sample CONFIG --out OUT.safetensors [--inputs IN.safetensors] [--checkpoint PATH]
                    [--seed N] [--count N] [--set key=value]...

Builds the config's model like `predict` and draws samples with its sampler, writing them to
OUT. For the Wan model: a flow-matching Euler sampler with classifier-free guidance (options
model.sample_steps, sample_guidance, sample_shift) writes `latents` [B,C,F,H,W] and `sigmas`.
IN holds the conditioning (context [B,L,text_dim]; optionally negative_context, noise, and image
[B,C,H,W] for ti2v and i2v); without IN, the first N samples of the config's data set condition it.

  --checkpoint PATH   take the weights from a training checkpoint or run folder
  --seed N            seed of the initial noise (default: run.seed)
  --count N           samples drawn when there is no IN (default 1)
)";

const char* kExportHelp = R"(usage: wanfw export CONFIG --out FOLDER [--checkpoint PATH] [--merge] [--max-shard-size BYTES] [--set key=value]...

Builds the config's model (with the weights of the config, or of --checkpoint: a training
checkpoint or a run folder's newest) and writes them in the model family's release layout, so
that other tools load them. For the Wan model: the official layout (official tensor names,
diffusion_pytorch_model*.safetensors shards with their index json, config.json); the A14B experts
go to high_noise_model/ and low_noise_model/. Shards hold at most BYTES (default 5000000000).

A LoRA run (model.lora.rank > 0) writes its adapters instead: wan_lora.safetensors (the Wan /
ComfyUI keys, diffusion_model.blocks.N.self_attn.q.lora_A.weight, with alpha) and
pytorch_lora_weights.safetensors (the diffusers PEFT keys), per expert for A14B.
  --merge             fold the adapters into the weights and write the full official layout
)";

const char* kModelInfoHelp = R"(usage: wanfw model-info CONFIG [--set key=value]...

Prints the config's model as its plugin describes it without building it: dimensions, parameter
count and a memory estimate. Allocates no weights, so it works for models larger than memory.
)";

const char* kPluginsHelp = R"(usage: wanfw plugins [CONFIG] [--plugin-path DIR]...
       wanfw plugins show NAME [CONFIG] [--plugin-path DIR]...

Lists the plugins found on the search path (each --plugin-path, then CONFIG's plugin_path, then
$WANFW_PLUGIN_PATH, then the install's plugin folder) with kind, version and file, and the
libraries that were refused and why. `show` prints one plugin's options with their types,
defaults and docs.
)";

const char* kConfigReferenceHelp = R"(usage: wanfw config-reference [--plugin-path DIR]...

Prints every core config section and every option of every plugin found, as Markdown: the
reference in docs/configuration.md is this output.
)";

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

[[noreturn]] void usage_error(const std::string& problem, const char* help) {
  throw ConfigError({"command line", 0, 0}, problem, std::string("\n") + help);
}

RunRequest parse_run_request(const std::vector<std::string>& args, bool allow_resume, const char* help,
                             std::map<std::string, std::string>* named = nullptr) {
  RunRequest request;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (named != nullptr && named->count(args[i])) {
      if (i + 1 >= args.size()) usage_error(fmt::format("{} needs a value", args[i]), help);
      (*named)[args[i]] = args[i + 1];
      ++i;
      continue;
    }
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= args.size()) usage_error(fmt::format("{} needs a value", flag), help);
      return args[++i];
    };
    if (a == "--set") request.overrides.push_back(value("--set"));
    else if (a.rfind("--set=", 0) == 0) request.overrides.push_back(a.substr(6));
    else if (allow_resume && a == "--resume") request.resume = value("--resume");
    else if (allow_resume && a.rfind("--resume=", 0) == 0) {
      request.resume = a.substr(9);
      if (request.resume.empty()) usage_error("--resume needs auto or a path", help);
    }
    else if (!a.empty() && a[0] == '-') usage_error(fmt::format("unknown option '{}'", a), help);
    else if (request.config.empty()) request.config = a;
    else usage_error(fmt::format("unexpected argument '{}'", a), help);
  }
  if (request.config.empty()) usage_error("missing CONFIG", help);
  return request;
}

}  // namespace

int run_command(const std::vector<std::string>& args) {
  const RunOutcome outcome = run_experiment(parse_run_request(args, true, kRunHelp));
  return outcome.stop_signal == 0 ? kSuccess : kFailure;
}

int validate_command(const std::vector<std::string>& args) {
  std::fputs(validate_experiment(parse_run_request(args, false, kValidateHelp)).c_str(), stdout);
  return kSuccess;
}

namespace {
/// Splits `--plugin-path DIR` flags from the other arguments.
std::vector<std::filesystem::path> plugin_path_flags(const std::vector<std::string>& args,
                                                     std::vector<std::string>* rest, const char* help) {
  std::vector<std::filesystem::path> extra;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--plugin-path") {
      if (i + 1 >= args.size()) usage_error("--plugin-path needs a folder", help);
      extra.emplace_back(args[++i]);
    } else if (!args[i].empty() && args[i][0] == '-') {
      usage_error(fmt::format("unknown option '{}'", args[i]), help);
    } else {
      rest->push_back(args[i]);
    }
  }
  return extra;
}
}  // namespace

int config_reference_command(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  const auto extra = plugin_path_flags(args, &rest, kConfigReferenceHelp);
  if (!rest.empty()) usage_error(fmt::format("unexpected argument '{}'", rest.front()), kConfigReferenceHelp);
  std::fputs(configuration_reference(PluginHost(PluginHost::search_path(extra))).c_str(), stdout);
  return kSuccess;
}

namespace {
/// The flags `predict` and `sample` share, parsed into an EvaluateRequest.
EvaluateRequest parse_evaluate_request(const std::vector<std::string>& args, const char* help,
                                       std::map<std::string, std::string> named) {
  for (const char* flag : {"--inputs", "--out", "--checkpoint"}) named.emplace(flag, "");
  EvaluateRequest request;
  request.run = parse_run_request(args, false, help, &named);
  request.inputs = named["--inputs"];
  request.outputs = named["--out"];
  request.checkpoint = named["--checkpoint"];
  if (request.outputs.empty()) usage_error("--out is required", help);
  auto integer = [&](const char* flag) -> std::optional<std::int64_t> {
    auto it = named.find(flag);
    if (it == named.end() || it->second.empty()) return std::nullopt;
    try {
      std::size_t used = 0;
      const long long value = std::stoll(it->second, &used);
      if (used == it->second.size() && value >= 0) return value;
    } catch (const std::exception&) {
    }
    usage_error(fmt::format("{} needs a non-negative integer, got '{}'", flag, it->second), help);
  };
  if (auto seed = integer("--seed")) request.seed = static_cast<std::uint64_t>(*seed);
  if (auto count = integer("--count")) request.count = *count;
  if (auto bytes = integer("--max-shard-size")) {
    if (*bytes < 1) usage_error("--max-shard-size needs a positive number of bytes", help);
    request.max_shard_bytes = *bytes;
  }
  return request;
}
}  // namespace

int predict_command(const std::vector<std::string>& args) {
  const EvaluateRequest request = parse_evaluate_request(args, kPredictHelp, {});
  if (request.inputs.empty()) usage_error("--inputs is required", kPredictHelp);
  predict_experiment(request);
  return kSuccess;
}

int sample_command(const std::vector<std::string>& args) {
  sample_experiment(parse_evaluate_request(args, kSampleHelp, {{"--seed", ""}, {"--count", ""}}));
  return kSuccess;
}

int export_command(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  bool merge = false;
  for (const auto& arg : args) (arg == "--merge" ? merge = true : (rest.push_back(arg), false));
  EvaluateRequest request = parse_evaluate_request(rest, kExportHelp, {{"--max-shard-size", ""}});
  request.merge_adapters = merge;
  export_experiment(request);
  return kSuccess;
}

int model_info_command(const std::vector<std::string>& args) {
  std::fputs(inspect_model(parse_run_request(args, false, kModelInfoHelp)).c_str(), stdout);
  return kSuccess;
}

int plugins_command(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  auto folders = plugin_path_flags(args, &rest, kPluginsHelp);
  std::string show;
  if (!rest.empty() && rest[0] == "show") {
    if (rest.size() < 2) usage_error("`plugins show` needs a plugin NAME", kPluginsHelp);
    show = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.size() > 1) usage_error(fmt::format("unexpected argument '{}'", rest[1]), kPluginsHelp);
  if (!rest.empty())  // a config: its plugin_path, after the --plugin-path folders
    for (auto& folder : config_plugin_path(rest[0])) folders.push_back(std::move(folder));
  const PluginHost host(PluginHost::search_path(folders));
  if (show.empty()) {
    std::printf("%-9s %-20s %-8s %s\n", "KIND", "NAME", "VERSION", "PATH");
    for (const auto& p : host.plugins())
      std::printf("%-9s %-20s %-8s %s\n", plugin_kind_name(p.descriptor->kind), p.descriptor->name.c_str(),
                  p.descriptor->version.c_str(), p.path.c_str());
    if (host.plugins().empty()) std::printf("(no plugins found)\n");
    std::printf("\nsearched:\n");
    for (const auto& folder : host.folders()) std::printf("  %s\n", folder.c_str());
    if (!host.skipped().empty()) {
      std::printf("\nrefused:\n");
      for (const auto& s : host.skipped()) std::printf("  %s\n    %s\n", s.path.c_str(), s.reason.c_str());
    }
    return kSuccess;
  }
  bool found = false;
  std::vector<std::string> names;
  for (const auto& p : host.plugins()) {
    const PluginDescriptor& d = *p.descriptor;
    names.push_back(d.name);
    if (d.name != show) continue;
    found = true;
    std::printf("%s (%s plugin, version %s)\n  %s\n  file: %s\n\noptions:\n", d.name.c_str(),
                plugin_kind_name(d.kind), d.version.c_str(), d.summary.c_str(), p.path.c_str());
    if (d.options.empty()) std::printf("  (none)\n");
    const std::function<void(const OptionSchema&, const std::string&)> print = [&](const OptionSchema& schema,
                                                                                    const std::string& prefix) {
      for (const auto& o : schema) {
        std::string type = option_type_name(o.type);
        if (o.type == OptionType::Choice) type += fmt::format(" {{{}}}", fmt::join(o.choices, ", "));
        const std::string def = o.required ? "required" : o.default_yaml.empty() ? "unset" : "default " + o.default_yaml;
        std::printf("  %s%s: %s, %s\n      %s\n", prefix.c_str(), o.name.c_str(), type.c_str(), def.c_str(),
                    o.doc.c_str());
        if (o.type == OptionType::EntryList) print(o.entries, prefix + o.name + "[].");
      }
    };
    print(d.options, "");
    for (const auto& key : d.subsections) std::printf("  %s: a section naming another plugin\n", key.c_str());
    std::printf("\n");
  }
  if (!found) {
    const std::string suggestion = closest_match(show, names);
    throw ConfigError({"command line", 0, 0}, fmt::format("no plugin named '{}' was found", show),
                      (suggestion.empty() ? std::string() : fmt::format("did you mean '{}'? ", suggestion)) +
                          (names.empty() ? std::string("no plugins were found; `wanfw plugins` shows where it looked")
                                         : fmt::format("found: {}", fmt::join(names, ", "))));
  }
  return kSuccess;
}

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
