#pragma once
// Using an experiment's model without training it: `wanfw predict`, `sample` and `export`.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "run/run_request.hpp"
#include "wanfw/data.hpp"

namespace wanfw {

/// What `wanfw predict` and `wanfw sample` evaluate, and where the results go.
struct EvaluateRequest {
  RunRequest run;
  std::filesystem::path inputs;   ///< safetensors of named input tensors ("" for sample: see below)
  std::filesystem::path outputs;  ///< safetensors the results are written to
  /// A checkpoint folder, or a run folder (its newest checkpoint), whose weights replace the
  /// config's; "" keeps the config's.
  std::filesystem::path checkpoint;
  std::optional<std::uint64_t> seed;  ///< sample: the noise seed (default run.seed)
  std::int64_t count = 1;             ///< sample without inputs: how many data-set samples condition it
  std::int64_t max_shard_bytes = 5'000'000'000;  ///< export: the largest weight file
  bool merge_adapters = false;                   ///< export --merge: adapters folded into full weights
  bool ema = false;  ///< --ema: the checkpoint's averages (the ema section) in place of the trained weights
  std::filesystem::path video;  ///< sample --video: the samples decoded to mp4 (<stem>-<i>.mp4 for several)
};

/// Builds the experiment's model (with its weights) on the strategy's device, runs it once
/// without gradients on the tensors of `inputs`, and writes its outputs to `outputs`.
void predict_experiment(const EvaluateRequest& request);

/// Builds the model like predict_experiment and draws samples (Model::sample). The conditioning
/// comes from `inputs`, or, without it, from the first `count` samples of the config's data set.
/// With `video`, the model plugin's decoder turns the sampled latents into mp4 files.
void sample_experiment(const EvaluateRequest& request);

/// What sample_in_batches hands over, batch by batch: the data-set samples that conditioned it
/// (their fields and ids) and what the model sampled for them.
using SampledBatch = std::function<void(const Batch& conditioning, const std::map<std::string, at::Tensor>& samples)>;

/// Builds the model like sample_experiment and samples the first `request.count` samples of the
/// config's data set (its first bucket) `batch` at a time, handing each batch over as it is made
/// (a data set of samples: `wanfw sample --dataset`). A batch draws from the seed of (the seed,
/// its first sample), so what a sample draws depends on the batch it falls in.
void sample_in_batches(const EvaluateRequest& request, std::int64_t batch, const SampledBatch& made);

/// Builds the model like predict_experiment and writes its weights in the model family's
/// release layout (Model::export_weights) to `request.outputs`, a folder.
void export_experiment(const EvaluateRequest& request);

}  // namespace wanfw
