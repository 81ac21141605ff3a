// `wanfw sample --dataset`: a model's samples, batch by batch, written as a data set folder
// (docs/data.md) beside the conditioning they came from. A bidirectional teacher recording its
// sampler's states (model.sample_trajectory_steps) writes a causal student's ODE pairs this way
// (docs/streaming.md): `latents` its final samples, `trajectory` its states, `context` the prompts.
#include <cstdio>
#include <string>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "command_line.hpp"
#include "commands.hpp"
#include "latent_shards/latent_dataset.hpp"
#include "run/evaluation.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace wanfw::cli {

namespace {

/// A video-shaped tensor ([C, F, H, W] and more) in bfloat16, as data sets keep latents; the rest
/// (timesteps, ...) as sampled.
at::Tensor stored(const at::Tensor& row) {
  return row.dim() >= 4 && row.is_floating_point() ? row.to(at::kBFloat16) : row.contiguous();
}

/// A name for an embedding by its bytes: the same prompt's embedding is stored once.
std::string embedding_name(const at::Tensor& embedding) {
  const at::Tensor bytes = embedding.to(at::kCPU, at::kFloat).contiguous();
  return "embedding " + caption_hash(std::string(static_cast<const char*>(bytes.data_ptr()), bytes.nbytes()));
}

}  // namespace

int sample_dataset(const EvaluateRequest& request, std::int64_t batch) {
  DatasetWriter writer(request.outputs, {{"sampler", request.run.config.string()}},
                       fmt::format("wanfw sample {} checkpoint {} seed {} count {} batch {}",
                                   request.run.config.string(), request.checkpoint.string(),
                                   request.seed ? std::to_string(*request.seed) : "run.seed", request.count, batch));
  std::int64_t written = 0;
  sample_in_batches(request, batch, [&](const Batch& conditioning, const std::map<std::string, at::Tensor>& samples) {
    const auto latents = samples.find("latents");
    if (latents == samples.end())
      throw PluginError("--dataset: the model sampled no 'latents', which give each sample its bucket");
    for (std::int64_t r = 0; r < conditioning.size; ++r) {
      Sample own, caption;
      for (const auto& [name, tensor] : samples)  // the per-sample outputs ("sigmas" is the schedule's)
        if (tensor.dim() >= 1 && tensor.size(0) == conditioning.size) own[name] = stored(tensor[r]);
      for (const auto& [name, tensor] : conditioning.fields)
        if (own.count(name) == 0) (name == "context" ? caption : own)[name] = stored(tensor[r]);
      const at::Tensor& made = own.at("latents");
      const Bucket bucket{made.size(1), made.size(2), made.size(3)};
      const std::int64_t id = conditioning.sample_ids[static_cast<std::size_t>(r)];
      writer.add(fmt::format("sample_{:06d}", id), bucket,
                 caption.count("context") ? embedding_name(caption.at("context")) : "", own, caption,
                 fmt::format("data set sample {}", id));
      ++written;
    }
  });
  const DatasetManifest manifest = writer.finish();
  std::printf("wrote %lld samples in %zu shard(s) to %s\n", static_cast<long long>(written), manifest.shards.size(),
              request.outputs.string().c_str());
  return kSuccess;
}

}  // namespace wanfw::cli
