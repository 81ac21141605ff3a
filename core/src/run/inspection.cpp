// `wanfw validate`, `wanfw inspect` and `wanfw plugins CONFIG`: what a config describes, worked
// out without training.

#include "run/inspection.hpp"

#include <sstream>

#include <fmt/format.h>

#include "run/experiment_assembly.hpp"
#include "run/training_layout.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace wanfw {

std::vector<fs::path> config_plugin_path(const fs::path& config_file) {
  Config config = Config::load(config_file);
  return CoreSettings::from(config).plugin_path;
}

std::string inspect_model(const RunRequest& request, const InspectRequest& inspect) {
  Config config = Config::load(request.config, request.overrides);
  CoreSettings settings = CoreSettings::from(config);
  const PluginHost host(PluginHost::search_path(settings.plugin_path));
  take_chosen_data_set_options(config, settings, host);  // a --set data.path plans that folder's buckets
  const PluginInfo* info = nullptr;
  TrainingLayout layout = training_layout(config, settings, host, inspect.gpus);
  layout.fit_device_bytes = inspect.fit_device_bytes;
  layout.fit_host_bytes = inspect.fit_host_bytes;
  if (std::optional<std::string> summary = describe_model(config, host, layout, &info))
    return *summary;
  throw PluginError(fmt::format("the model plugin '{}' ({}) cannot describe itself without being built",
                                info->descriptor->name, info->path.string()),
                    "`wanfw validate` builds the model and reports its trainable parameters");
}

std::string validate_experiment(const RunRequest& given) {
  RunRequest request = given;
  request.one_process_unless_launched = true;
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
      model += fmt::format(" {} {} {};", field.name, shape_text(field), c10::toString(field.dtype));
    model += "\n";
  }
  std::string data = fmt::format("{} ({})", e.settings.data.name, e.data->training_set()->summary());
  for (const auto& line : e.data->sampler(e.strategy->data_world_size(), e.strategy->accumulation_steps())->describe())
    data += "\n    " + line;
  const std::string strategy =
      e.ranks_laid_out > 0
          ? fmt::format("{}, laid out on {} ranks: checked as one process (start its ranks with torchrun or srun)",
                        e.config.string_at("strategy.name"), e.ranks_laid_out)
          : e.strategy->describe();
  return fmt::format("{}: valid\n  strategy: {}\n  model: {} {}  loggers: {}\n  data: {}\n--- resolved config ---\n{}",
                     request.config.string(), strategy, e.config.string_at("model.name"), model,
                     e.loggers.size(), data, e.resolved_yaml);
}

}  // namespace wanfw
