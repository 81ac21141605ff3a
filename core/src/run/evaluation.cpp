// `wanfw predict`, `sample` and `export`: the experiment's model, with a checkpoint's weights,
// evaluated once; `wanfw decode`: its plugin's decoder alone.

#include "run/evaluation.hpp"

#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/run_directory.hpp"
#include "config/config.hpp"
#include "config/core_sections.hpp"
#include "host/console.hpp"
#include "plugin_host/plugin_host.hpp"
#include "run/experiment_assembly.hpp"
#include "wanfw/error.hpp"
#include "wanfw/safetensors.hpp"
#include "wanfw/tensor_check.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

/// The model of an evaluation, on the strategy's device, with the checkpoint's weights if given.
Experiment evaluation_model(const EvaluateRequest& request) {
  Experiment e = assemble(request.run);
  if (!request.checkpoint.empty()) {
    const fs::path checkpoint = locate_checkpoint(request.checkpoint, "--checkpoint");
    Checkpoint::open(checkpoint)->load_weights(*e.model);
    spdlog::info("weights from {}", checkpoint.string());
  }
  place_model(e);
  e.strategy->begin_evaluation(*e.model);  // a strategy that shards the weights gathers them
  return e;
}

std::map<std::string, at::Tensor> read_tensors(const fs::path& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> tensors;
  for (const auto& record : file.records())
    tensors.emplace(record.name, read_checked(file.tensor(record.name), TensorRole::input(), path, record.name));
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
    const std::int64_t available = e.data->training_set()->size();
    if (request.count < 1 || request.count > available)
      throw ConfigError(SourceLocation{"command line", 0, 0},
                        fmt::format("--count {} is outside the data set's 1..{} samples", request.count, available),
                        "use a larger data set or lower --count");
    const Batch first = e.data->first_training_samples(request.count);
    inputs = first.fields;
    spdlog::info("conditioning on the first {} sample(s) of the data set's first bucket", first.size);
  }
  const std::uint64_t seed = request.seed.value_or(e.settings.run.seed);
  write_results(request.outputs, e.model->sample(inputs, seed), "wanfw sample");
}

void decode_experiment(const EvaluateRequest& request, const std::string& device_name) {
  Config config = Config::load(request.run.config, request.run.overrides);
  const CoreSettings settings = CoreSettings::from(config);
  configure_console(settings.run.log_level, 0);
  const PluginHost host(PluginHost::search_path(settings.plugin_path));
  PluginContext context;
  context.seed = settings.run.seed;
  try {
    context.device = context.train_device = c10::Device(device_name);
  } catch (const std::exception&) {
    throw ConfigError(SourceLocation{"command line", 0, 0}, fmt::format("--device '{}' is not a device", device_name),
                      "use cpu, cuda or cuda:N");
  }
  if (!config.has("model"))
    throw ConfigError(config.where("model"), "the config has no 'model' section",
                      "decode with the config the latents were sampled with");
  const std::shared_ptr<VideoDecoder> decoder = host.make_decoder(config, "model", context);
  const std::map<std::string, at::Tensor> inputs = read_tensors(request.inputs);
  const auto latents = inputs.find("latents");
  if (latents == inputs.end())
    throw FileError(fmt::format("{}: holds no tensor 'latents'", request.inputs.string()),
                    "decode what `wanfw sample` wrote, or a file with the model's latents under 'latents'");
  spdlog::info("{}", decoder->describe());
  const auto started = std::chrono::steady_clock::now();
  const at::Tensor video = decoder->decode(latents->second);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("decoded {} sample(s) of {} latent frames to {} frames of {}x{} in {:.2f} s", video.size(0),
               latents->second.size(2), video.size(2), video.size(3), video.size(4), seconds);
  write_results(request.outputs, {{"video", video}}, "wanfw decode");
}

void export_experiment(const EvaluateRequest& request) {
  Experiment e = evaluation_model(request);
  e.model->export_weights(request.outputs, ExportSettings{request.max_shard_bytes, request.merge_adapters});
}

}  // namespace wanfw
