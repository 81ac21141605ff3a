#include "experiment.hpp"

#include <cstdlib>
#include <functional>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include "checkpoint_store.hpp"
#include "core_sections.hpp"
#include "data_loader.hpp"
#include "wanfw/file_io.hpp"
#include "progress.hpp"
#include "trainer.hpp"
#include "config.hpp"
#include "console.hpp"
#include "wanfw/error.hpp"
#include "plugin_host.hpp"
#include "wanfw/safetensors.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

/// Everything a run is made of, built from the config before any training.
struct Experiment {
  Config config;
  CoreSettings settings;
  std::unique_ptr<PluginHost> host;
  std::shared_ptr<Strategy> strategy;
  std::shared_ptr<Model> model;
  std::vector<std::shared_ptr<Logger>> loggers;
  std::shared_ptr<Dataset> dataset;
  /// Set instead of `model` when the model was described without being built.
  std::optional<std::string> model_summary;
};

/// The model plugin's own summary of the config's model section, worked out without building it;
/// nothing if the plugin cannot describe itself. Records the resolved model options in `config`.
std::optional<std::string> describe_model(Config& config, const PluginHost& host, const PluginInfo** plugin = nullptr) {
  const PluginInfo& info = host.find(PluginKind::Model, config.string_at("model.name"), config.where("model.name"));
  if (plugin != nullptr) *plugin = &info;
  if (info.descriptor->inspect_model == nullptr) return std::nullopt;
  const Options options = config.section("model", info.descriptor->options, {"name"});
  config.record_resolved(options, info.descriptor->name);
  return info.descriptor->inspect_model(options);
}

bool usable(const c10::Device& device) {
  if (!device.is_cuda()) return device.is_cpu();
  return torch::cuda::is_available() && device.index() < static_cast<int>(torch::cuda::device_count());
}

at::ScalarType compute_dtype(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::BF16: return at::kBFloat16;
    case PrecisionMode::FP16: return at::kHalf;
    case PrecisionMode::FP32: break;
  }
  return at::kFloat;
}

/// How `assemble` treats the model: build it (training, predict), or have its plugin describe it
/// without allocating weights when the plugin can (validate).
enum class ModelAssembly { Build, DescribeIfPossible };

Experiment assemble(const RunRequest& request, ModelAssembly assembly = ModelAssembly::Build) {
  Experiment e;
  e.config = Config::load(request.config, request.overrides);
  e.settings = CoreSettings::from(e.config);
  configure_console(e.settings.run.log_level, 0);
  e.host = std::make_unique<PluginHost>(PluginHost::search_path(e.settings.plugin_path));

  for (const auto& note : e.config.notes()) spdlog::warn("{}", note);

  PluginContext context;
  context.seed = e.settings.run.seed;
  if (!e.config.has("strategy"))
    throw ConfigError(e.config.where("strategy"), "the config has no 'strategy' section",
                      "add 'strategy: {name: single}' to train on one device");
  e.strategy = e.host->make_strategy(e.config, "strategy", context);
  configure_console(e.settings.run.log_level, e.strategy->rank());
  // Models and loggers learn where the model will live, so weights are built there. A device this
  // machine lacks (a config validated away from its GPUs) leaves them on the CPU; the strategy's
  // setup names the missing device when a run starts.
  context.device = usable(e.strategy->device()) ? e.strategy->device() : c10::Device(c10::kCPU);
  context.dtype = compute_dtype(e.settings.precision.mode);

  if (!e.config.has("model"))
    throw ConfigError(e.config.where("model"), "the config has no 'model' section",
                      "add 'model: {name: <model plugin>}'; `wanfw plugins` lists them");
  if (assembly == ModelAssembly::DescribeIfPossible) e.model_summary = describe_model(e.config, *e.host);
  if (!e.model_summary) {
    torch::manual_seed(e.settings.run.seed);  // the model's initial weights follow the run's seed
    e.model = e.host->make_model(e.config, "model", context);
  }

  const std::size_t n = e.config.sequence_size("loggers");
  for (std::size_t i = 0; i < n; ++i)
    e.loggers.push_back(e.host->make_logger(e.config, "loggers." + std::to_string(i), context));

  if (e.model)
    e.dataset = std::make_shared<SyntheticDataset>(e.model->batch_fields(), e.settings.data.num_samples,
                                                   e.settings.run.seed);
  return e;
}

/// version_<N> folders of a run, in order of N.
std::vector<fs::path> versions_of(const fs::path& run_root) {
  std::vector<std::pair<long, fs::path>> found;
  std::error_code ec;
  if (fs::is_directory(run_root, ec))
    for (const auto& entry : fs::directory_iterator(run_root, ec)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_directory() && name.rfind("version_", 0) == 0) {
        char* end = nullptr;
        const long n = std::strtol(name.c_str() + 8, &end, 10);
        if (end && *end == '\0') found.emplace_back(n, entry.path());
      }
    }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [n, path] : found) out.push_back(path);
  return out;
}

/// The resolved config's scalar leaves as "section.key" (list items as "loggers.0.name") -> text.
std::map<std::string, std::string> flatten_yaml(const std::string& yaml) {
  std::map<std::string, std::string> out;
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& node,
                                                                         const std::string& prefix) {
    if (node.IsScalar()) out[prefix] = node.Scalar();
    else if (node.IsMap())
      for (const auto& item : node) walk(item.second, prefix.empty() ? item.first.Scalar() : prefix + "." + item.first.Scalar());
    else if (node.IsSequence()) {
      bool scalars = true;
      for (const auto& item : node) scalars = scalars && item.IsScalar();
      if (scalars) {  // a list of values reads better as one entry: [0.9, 0.999]
        std::string joined;
        for (const auto& item : node) joined += (joined.empty() ? "" : ", ") + item.Scalar();
        out[prefix] = "[" + joined + "]";
      } else {
        std::size_t i = 0;
        for (const auto& item : node) walk(item, prefix + "." + std::to_string(i++));
      }
    }
  };
  walk(YAML::Load(yaml), "");
  return out;
}

struct RunPlace {
  fs::path run_dir;
  std::optional<fs::path> checkpoint;
};

/// A checkpoint folder as given, or the newest complete checkpoint of a run folder.
fs::path locate_checkpoint(const fs::path& path, const char* flag) {
  if (!fs::exists(path))
    throw FileError(fmt::format("{} {}: no such checkpoint or run folder", flag, path.string()),
                    "pass a run folder or a <run>/checkpoints/step-* folder");
  if (CheckpointStore::is_checkpoint(path)) return path;
  if (auto latest = CheckpointStore(path).latest()) return *latest;
  throw FileError(fmt::format("{} {}: neither a checkpoint nor a run folder with a complete checkpoint", flag,
                              path.string()),
                  "checkpoints live in <run>/checkpoints/step-*");
}

RunPlace choose_run_dir(const CoreSettings& settings, const std::string& resume) {
  const fs::path run_root = settings.run.output_dir / settings.run.name;
  const auto versions = versions_of(run_root);
  if (resume.empty() || resume == "auto") {
    if (resume == "auto")
      for (auto it = versions.rbegin(); it != versions.rend(); ++it)
        if (auto latest = CheckpointStore(*it).latest()) return {*it, latest};
    if (resume == "auto")
      spdlog::info("--resume auto: no checkpoint under {}; starting a new run", run_root.string());
    long next = 0;
    if (!versions.empty()) next = std::strtol(versions.back().filename().string().c_str() + 8, nullptr, 10) + 1;
    return {run_root / fmt::format("version_{}", next), std::nullopt};
  }
  const fs::path checkpoint = locate_checkpoint(resume, "--resume");
  return {checkpoint.parent_path().parent_path(), checkpoint};
}

}  // namespace

RunOutcome run_experiment(const RunRequest& request) {
  Experiment e = assemble(request);
  Strategy& strategy = *e.strategy;
  const bool main = strategy.is_main();
  const RunPlace place = choose_run_dir(e.settings, request.resume);
  // Every rank picks the run folder before the main one creates it, so they all pick the same.
  strategy.barrier();

  if (main) {
    spdlog::info("wanfw {} | LibTorch {} | strategy: {}", version(), host_torch_version(), strategy.describe());
    std::error_code ec;
    fs::create_directories(place.run_dir, ec);
    if (ec)
      throw FileError(fmt::format("{}: cannot create the run folder: {}", place.run_dir.string(), ec.message()));
    write_file_atomically(place.run_dir / "config.yaml", e.config.resolved_yaml());
    spdlog::info("run folder: {}", place.run_dir.string());
  }
  strategy.setup(*e.model);

  auto sampler = std::make_shared<ShardedSampler>(ShardedSampler::Options{
      e.settings.data.num_samples, strategy.rank(), strategy.world_size(), e.settings.data.shuffle,
      e.settings.data.drop_last, e.settings.run.seed});
  auto loader = std::make_unique<DataLoader>(
      e.dataset, sampler,
      DataLoader::Options{e.settings.data.batch_size, e.settings.data.drop_last, e.settings.data.workers,
                          e.settings.data.prefetch});

  std::vector<std::shared_ptr<Logger>> loggers;
  if (main) {
    const std::int64_t resume_step =
        place.checkpoint ? CheckpointStore::load_step(*place.checkpoint) : 0;
    const std::string yaml = e.config.resolved_yaml();
    const auto hparams = flatten_yaml(yaml);
    for (auto& logger : e.loggers) {
      logger->open({place.run_dir, resume_step});
      logger->log_text(resume_step, "config", "```yaml\n" + yaml + "\n```");
      logger->log_hparams(hparams);
      loggers.push_back(logger);
    }
  }

  // The held-out set: the same fields, drawn from a seed of its own.
  std::shared_ptr<Dataset> validation_set;
  if (e.settings.validation.every > 0)
    validation_set = std::make_shared<SyntheticDataset>(e.model->batch_fields(), e.settings.validation.num_samples,
                                                        e.settings.run.seed ^ 0x5eed'7a11'da7aULL);
  Trainer trainer(e.settings, e.config.resolved_yaml(), e.model, e.strategy, loggers, std::move(loader),
                  place.run_dir, validation_set);
  const TrainingResult result = trainer.fit(place.checkpoint);
  for (auto& logger : loggers) logger->close();

  if (main) {
    if (result.stop_signal != 0)
      spdlog::warn("stopped by signal {} at step {}; checkpoint written; continue with --resume auto",
                   result.stop_signal, result.final_step);
    std::string memory = fmt::format("peak memory {:.0f} MiB", result.peak_memory_mib);
    if (result.peak_gpu_memory_mib > 0) memory += fmt::format(" (GPU {:.0f} MiB)", result.peak_gpu_memory_mib);
    spdlog::info("done: {} steps in {} | {:.1f} samples/s | {} | final loss {:.6g} | best loss {:.6g}",
                 result.final_step, format_duration(result.wall_seconds),
                 static_cast<double>(result.samples) / std::max(result.wall_seconds, 1e-9), memory, result.final_loss,
                 result.best_loss);
    if (result.last_checkpoint) spdlog::info("last checkpoint: {}", result.last_checkpoint->string());
    spdlog::info("outputs: {}", place.run_dir.string());
  }
  RunOutcome outcome;
  outcome.run_dir = place.run_dir;
  outcome.final_step = result.final_step;
  outcome.stop_signal = result.stop_signal;
  outcome.last_checkpoint = result.last_checkpoint;
  return outcome;
}

std::vector<fs::path> config_plugin_path(const fs::path& config_file) {
  Config config = Config::load(config_file);
  return CoreSettings::from(config).plugin_path;
}

std::string inspect_model(const RunRequest& request) {
  Config config = Config::load(request.config, request.overrides);
  const CoreSettings settings = CoreSettings::from(config);
  const PluginHost host(PluginHost::search_path(settings.plugin_path));
  const PluginInfo* info = nullptr;
  if (std::optional<std::string> summary = describe_model(config, host, &info)) return *summary;
  throw PluginError(fmt::format("the model plugin '{}' ({}) cannot describe itself without being built",
                                info->descriptor->name, info->path.string()),
                    "`wanfw validate` builds the model and reports its trainable parameters");
}

namespace {

/// The model of an evaluation, on the strategy's device, with the checkpoint's weights if given.
Experiment evaluation_model(const EvaluateRequest& request) {
  Experiment e = assemble(request.run);
  if (!request.checkpoint.empty()) {
    const fs::path checkpoint = locate_checkpoint(request.checkpoint, "--checkpoint");
    CheckpointStore::load_weights(checkpoint, *e.model);
    spdlog::info("weights from {}", checkpoint.string());
  }
  e.strategy->setup(*e.model);
  return e;
}

std::map<std::string, at::Tensor> read_tensors(const fs::path& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> tensors;
  for (const auto& record : file.records()) tensors.emplace(record.name, file.load(record.name));
  return tensors;
}

void write_results(const fs::path& path, const std::map<std::string, at::Tensor>& results, const char* writer) {
  std::vector<std::pair<std::string, at::Tensor>> ordered(results.begin(), results.end());
  write_safetensors(path, ordered, {{"written_by", writer}});
  spdlog::info("wrote {} tensor(s) to {}", ordered.size(), path.string());
}

}  // namespace

void predict_experiment(const EvaluateRequest& request) {
  Experiment e = evaluation_model(request);
  write_results(request.outputs, e.model->predict(read_tensors(request.inputs)), "wanfw predict");
}

void sample_experiment(const EvaluateRequest& request) {
  Experiment e = evaluation_model(request);
  std::map<std::string, at::Tensor> inputs;
  if (!request.inputs.empty()) {
    inputs = read_tensors(request.inputs);
  } else {
    if (request.count < 1 || request.count > e.dataset->size())
      throw ConfigError(SourceLocation{"command line", 0, 0},
                        fmt::format("--count {} is outside the data set's 1..{} samples", request.count,
                                    e.dataset->size()),
                        "raise data.num_samples or lower --count");
    std::vector<std::map<std::string, at::Tensor>> items;
    for (std::int64_t i = 0; i < request.count; ++i) items.push_back(e.dataset->get(i));
    inputs = collate(items).fields;
    spdlog::info("conditioning on the first {} sample(s) of the data set", request.count);
  }
  const std::uint64_t seed = request.seed.value_or(e.settings.run.seed);
  write_results(request.outputs, e.model->sample(inputs, seed), "wanfw sample");
}

void export_experiment(const EvaluateRequest& request) {
  Experiment e = evaluation_model(request);
  e.model->export_weights(request.outputs, request.max_shard_bytes);
}

std::string validate_experiment(const RunRequest& request) {
  Experiment e = assemble(request, ModelAssembly::DescribeIfPossible);
  std::string model;
  if (e.model_summary) {
    model = "(described by its plugin without allocating weights)\n";
    std::stringstream lines(*e.model_summary);
    for (std::string line; std::getline(lines, line);) model += "    " + line + "\n";
  } else {
    std::int64_t parameters = 0;
    for (const auto& [name, tensor] : e.model->trainable_parameters()) parameters += tensor.numel();
    model = fmt::format("{} trainable parameters; batch fields:", parameters);
    for (const auto& field : e.model->batch_fields())
      model += fmt::format(" {} {} {};", field.name, c10::str(c10::IntArrayRef(field.shape)),
                           c10::toString(field.dtype));
    model += "\n";
  }
  return fmt::format("{}: valid\n  strategy: {}\n  model: {} {}  loggers: {}\n  data: {} synthetic samples, batch size {}\n"
                     "--- resolved config ---\n{}",
                     request.config.string(), e.strategy->describe(), e.config.string_at("model.name"), model,
                     e.loggers.size(), e.settings.data.num_samples, e.settings.data.batch_size,
                     e.config.resolved_yaml());
}

}  // namespace wanfw
