#include "train/validation.hpp"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "media/video_frames.hpp"
#include "numerics/generators.hpp"
#include "wanfw/sample_random.hpp"

namespace wanfw {

namespace {

/// The module in eval mode without gradients for a scope; its mode is put back afterwards.
class EvaluationScope {
 public:
  explicit EvaluationScope(Model& model) : module_(model.module()), was_training_(module_->is_training()) {
    module_->eval();
  }
  ~EvaluationScope() { module_->train(was_training_); }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  bool was_training_;
  torch::NoGradGuard no_grad_;
};

}  // namespace

Validation::Validation(const CoreSettings& settings, const TrainingData& data, Model& model, Strategy& strategy)
    : settings_(settings), data_(data), model_(model), strategy_(strategy) {}

bool Validation::due(std::int64_t step, std::int64_t total_steps) const {
  const std::int64_t every = settings_.validation.every;
  return (data_.validation_set() || data_.preview_count() > 0) && every > 0 &&
         (step % every == 0 || step == total_steps);
}

std::map<std::string, double> Validation::run(std::int64_t step) {
  if (!data_.validation_set()) return {};  // preview prompts alone: nothing held out to score
  const auto started = std::chrono::steady_clock::now();
  const Dataset& set = *data_.validation_set();
  std::map<std::string, double> sums;
  std::int64_t samples = 0;
  {
    EvaluationScope scope(model_);
    for (const auto& indices : data_.validation_batches(strategy_.data_rank(), strategy_.data_world_size())) {
      const Batch batch = data_.validation_batch(indices).to(strategy_.device());
      // Models draw from the batch's sample streams; the default generators get a fixed seed too,
      // for plugins that still use them.
      SeededGenerators seeded(mix_seed(settings_.run.seed ^ static_cast<std::uint64_t>(indices.front() + 1)));
      for (const auto& [name, value] : model_.validation_step(batch))
        sums["val/" + name] += value.detach().to(at::kDouble).item<double>() * static_cast<double>(batch.size);
      samples += batch.size;
    }
  }
  for (auto& [name, sum] : sums) sum /= static_cast<double>(std::max<std::int64_t>(samples, 1));
  sums = strategy_.reduce_metrics(std::move(sums));
  if (strategy_.is_main()) {
    std::string line;
    for (const auto& [name, value] : sums) line += fmt::format(" | {} {:.6g}", name, value);
    spdlog::info("validation at step {} ({} samples, {:.1f} s){}", step, set.size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), line);
  }
  return sums;
}

void Validation::previews(std::int64_t step, LoggerSet& loggers, const DecoderFactory& make_decoder,
                          const std::filesystem::path& run_dir) {
  if (!strategy_.is_main()) return;
  const auto started = std::chrono::steady_clock::now();
  const std::shared_ptr<VideoDecoder> decoder = make_decoder ? make_decoder() : nullptr;
  if (!decoder && loggers.empty()) return;
  const std::filesystem::path folder = run_dir / "previews" / fmt::format("step-{:08d}", step);
  const std::int64_t count = data_.preview_count();
  double decoding = 0;
  bool videos = false;
  for (std::int64_t i = 0; i < count; ++i) {
    const Batch batch = data_.preview_batch(i).to(strategy_.device());
    const std::uint64_t seed = settings_.run.seed + static_cast<std::uint64_t>(i);
    EvaluationScope scope(model_);
    SeededGenerators seeded(seed);
    const at::Tensor sample = model_.preview(batch, seed);
    if (!sample.defined()) continue;
    if (decoder) {
      decoding += show_preview_video(step, data_.preview_name(i), sample, *decoder, loggers, folder);
      videos = true;
    } else {
      loggers.image(step, i == 0 ? std::string("preview/latents") : fmt::format("preview/latents-{}", i),
                    latent_strip(sample[0]));
    }
  }
  if (videos)
    spdlog::info("previews at step {}: {} sample(s) decoded in {:.1f} s ({:.1f} s in all) -> {} ({})", step, count,
                 decoding, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                 folder.string(), decoder->describe());
}

}  // namespace wanfw
