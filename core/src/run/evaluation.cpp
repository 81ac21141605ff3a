// `wanfw predict`, `sample` and `export`: the experiment's model, with a checkpoint's weights,
// evaluated once.

#include "run/evaluation.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/run_directory.hpp"
#include "checkpoint/state_piece_files.hpp"
#include "config/config.hpp"
#include "config/core_sections.hpp"
#include "host/console.hpp"
#include "plugin_host/plugin_host.hpp"
#include "run/decoding.hpp"
#include "run/experiment_assembly.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/parallel/state_pieces.hpp"
#include "wanfw/sample_random.hpp"
#include "wanfw/io/tensor_check.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

/// Every trainable parameter of `model` the checkpoint in `folder` averaged takes its average.
void load_averages(Model& model, const fs::path& folder) {
  const auto rows = open_checkpoint_rows(folder, "optimizer");
  torch::NoGradGuard no_grad;
  std::size_t taken = 0;
  for (const auto& [name, param] : model.trainable_parameters()) {
    if (!rows->contains(name + ".ema")) continue;
    require_shape(*rows, name + ".ema", param.sizes().vec());
    param.copy_(rows->rows(name + ".ema", 0, param.dim() == 0 ? 1 : param.size(0), TensorRole::weight())
                    .view(param.sizes()));
    ++taken;
  }
  if (taken == 0)
    throw FileError(fmt::format("--ema: {} holds no averages (<parameter>.ema)", rows->path().string()),
                    "the run trained without an ema section (ema.decay); leave --ema out for its weights");
  spdlog::info("--ema: {} averaged tensor(s) in place of the trained weights", taken);
}

/// The model of an evaluation, on the strategy's device, with the checkpoint's weights if given.
Experiment evaluation_model(const EvaluateRequest& request) {
  if (request.ema && request.checkpoint.empty())
    throw ConfigError(SourceLocation{"command line", 0, 0}, "--ema takes the averages of a training checkpoint",
                      "add --checkpoint PATH (a checkpoint or run folder of a run with an ema section)");
  Experiment e = assemble(request.run);
  if (!request.checkpoint.empty()) {
    const fs::path checkpoint = locate_checkpoint(request.checkpoint, "--checkpoint");
    Checkpoint::open(checkpoint)->load_weights(*e.model);
    spdlog::info("weights from {}", checkpoint.string());
    if (request.ema) load_averages(*e.model, checkpoint);
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

void write_results(const fs::path& path, const std::map<std::string, at::Tensor>& results, const char* writer,
                   std::map<std::string, std::string> metadata = {}) {
  std::vector<std::pair<std::string, at::Tensor>> ordered(results.begin(), results.end());
  metadata["written_by"] = writer;
  write_safetensors(path, ordered, metadata);
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
  // The decoder before the sampling: a refused --video costs no sampling, and a decoder that
  // streams writes each chunk's frames while a streaming model makes the next.
  std::shared_ptr<VideoDecoder> decoder;
  std::optional<StreamedVideos> streamed;
  if (!request.video.empty()) {
    decoder = required_decoder(*e.host, e.config, e.strategy->device(), e.settings.run.seed);
    if (std::unique_ptr<VideoStream> stream = decoder->stream())
      streamed.emplace(std::move(stream), request.video, decoder->fps());
  }
  const std::map<std::string, at::Tensor> samples =
      streamed ? e.model->sample_streamed(inputs, seed, [&](const at::Tensor& chunk) { streamed->add(chunk); })
               : e.model->sample(inputs, seed);
  // The model plugin's name lets `wanfw decode LATENTS` find the decoder without the config.
  write_results(request.outputs, samples, "wanfw sample", {{"model", e.config.string_at("model.name")}});
  if (request.video.empty()) return;
  if (streamed) {
    streamed->finish();
    return;
  }
  const auto latents = samples.find("latents");
  if (latents == samples.end())
    throw PluginError(fmt::format("--video: the model '{}' sampled no 'latents' to decode",
                                  e.config.string_at("model.name")));
  write_videos(decoder->decode(latents->second), request.video, decoder->fps());
}

void sample_in_batches(const EvaluateRequest& request, std::int64_t batch, const SampledBatch& made) {
  Experiment e = evaluation_model(request);
  const std::int64_t available = e.data->training_set()->size();
  if (request.count < 1 || request.count > available)
    throw ConfigError(SourceLocation{"command line", 0, 0},
                      fmt::format("--count {} is outside the data set's 1..{} samples", request.count, available),
                      "use a larger data set or lower --count");
  if (batch < 1)
    throw ConfigError(SourceLocation{"command line", 0, 0}, fmt::format("--batch {} must be at least 1", batch));
  const std::uint64_t seed = request.seed.value_or(e.settings.run.seed);
  std::int64_t done = 0;
  for (std::int64_t start = 0; start < request.count; start += batch) {
    const Batch conditioning = e.data->first_training_samples(request.count, start, batch);
    if (conditioning.size == 0) break;  // the first bucket holds fewer than --count
    const std::map<std::string, at::Tensor> samples =
        e.model->sample(conditioning.fields, sample_stream_seed(seed, conditioning.sample_ids.front(), 0, "batch"));
    made(conditioning, samples);
    done += conditioning.size;
    spdlog::info("sampled {}/{}", done, request.count);
  }
  if (done < request.count)
    spdlog::warn("the data set's first bucket holds {} of the {} samples asked for", done, request.count);
}

void export_experiment(const EvaluateRequest& request) {
  Experiment e = evaluation_model(request);
  e.model->export_weights(request.outputs, ExportSettings{request.max_shard_bytes, request.merge_adapters});
}

}  // namespace wanfw
