#pragma once
// Internal: the config sections the core itself owns, their schemas, and typed settings.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "wanfw/precision.hpp"

namespace wanfw {

/// Top-level keys of an experiment config.
const std::vector<std::string>& top_level_sections();
/// (section name, schema) for every core section, in documentation order.
const std::vector<std::pair<std::string, OptionSchema>>& core_schemas();
/// The names of a core section's options ("data": batch_size, workers, ...): in a section that
/// also names a plugin (data), the keys that are not the plugin's.
std::vector<std::string> core_option_names(const std::string& section);

struct RunSettings {
  std::string name;
  std::filesystem::path output_dir;
  std::uint64_t seed = 0;
  std::string log_level;
};

struct TrainerSettings {
  std::int64_t max_steps = 0;
  std::int64_t epochs = 1;
  std::int64_t log_every = 10;
  double grad_clip = 0.0;
  bool nan_guard = true;
  std::string progress;  ///< auto | bar | lines | off
  std::int64_t histogram_every = 0;  ///< 0: no weight/gradient histograms
  std::int64_t cpu_memory_cache_mb = 512;  ///< CPU runs: freed tensor memory kept for reuse; 0: none
  std::int64_t profile_steps = 0;  ///< steps the torch profiler records (0: none)
  std::int64_t profile_from = 5;   ///< the first of them (1-based)
};

/// optimizer.state: the fp32 masters, AdamW moments and averages beside the weights (Device) or in
/// host memory, stepped by the host's cores (Host).
enum class OptimizerStateHome { Device, Host };

struct OptimizerSettings {
  double lr = 1e-4;
  std::string lr_scaling;  ///< none | linear | sqrt
  std::int64_t lr_reference_batch = 0;  ///< 0: data.batch_size
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  std::string implementation;  ///< auto | fused | per_tensor
  /// Where the fp32 masters, AdamW moments and averages live (optimizer.state).
  OptimizerStateHome state = OptimizerStateHome::Device;
};

/// The `ema` section: exponential moving averages of the trained parameters
/// (wanfw/parameter_averages.hpp).
struct EmaSettings {
  double decay = 0.0;                ///< 0: no averages
  std::int64_t start_step = 0;       ///< up to this step the average is the weights themselves
  std::vector<std::string> groups;   ///< the parameter groups averaged; empty: every group
  SourceLocation groups_where;       ///< where the config sets `groups`, for an error about a name
  bool enabled() const { return decay > 0; }
};

struct SchedulerSettings {
  std::int64_t warmup_steps = 0;
  std::string decay;  ///< constant | cosine
  double min_lr_ratio = 0.0;
};

struct DataSettings {
  std::string name;  ///< the data set plugin
  std::int64_t batch_size = 1;
  std::vector<std::pair<std::string, std::int64_t>> bucket_batch_size;  ///< ("FxHxW", batch size)
  bool shuffle = true;
  bool drop_last = true;
  double caption_dropout = 0;
  bool skip_bad_samples = false;
  bool sample_log = false;
  int workers = 0;
  int prefetch = 2;
};

/// The sample bound the core enforces on sizes held in memory (samples per data set, batch size).
inline constexpr std::int64_t kMaxSamples = 100'000'000;

struct ValidationSettings {
  std::int64_t every = 0;  ///< 0: no validation
  std::int64_t num_samples = 16;
  std::int64_t batch_size = 0;  ///< 0: data.batch_size
  bool preview = true;          ///< log the model's previews at each validation
  std::int64_t preview_samples = 1;  ///< held-out samples (or preview prompts) previewed
  std::string preview_prompts;       ///< a data set folder of prompts previewed instead; empty: none
  bool at_start = false;             ///< also validate (and preview) before a new run's first step
};

/// The block_swap section (the core's units runtime streams the model's blocks: units/block_swap.hpp).
struct BlockSwapSection {
  std::int64_t blocks = 0;  ///< 0: off
  std::int64_t ring = 2;    ///< at most `blocks`: a larger ring is clamped to it
  std::string host_memory = "auto";
  std::int64_t ring_written = 0;  ///< the ring the config wrote when it was clamped (the run warns); else 0
};

struct CheckpointSettings {
  std::int64_t every = 0;
  std::int64_t keep_last = 3;
};

/// Every core section, validated and typed. Records the resolved values in `config`.
struct CoreSettings {
  RunSettings run;
  TrainerSettings trainer;
  OptimizerSettings optimizer;
  EmaSettings ema;
  SchedulerSettings scheduler;
  DataSettings data;
  ValidationSettings validation;
  PrecisionOptions precision;
  CheckpointSettings checkpoint;
  BlockSwapSection block_swap;
  std::vector<std::filesystem::path> plugin_path;

  static CoreSettings from(Config& config);
};

}  // namespace wanfw
