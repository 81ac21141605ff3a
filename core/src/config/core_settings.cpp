#include "config/core_sections.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "config/core_limits.hpp"
#include "wanfw/data.hpp"

namespace wanfw {

using namespace limits;

namespace {
const OptionSchema& schema_of(const std::string& name) {
  for (const auto& [section, schema] : core_schemas())
    if (section == name) return schema;
  throw Error("internal: no core section " + name);
}

void require_positive(const Options& o, const char* name, std::int64_t value, std::int64_t minimum = 1) {
  if (value < minimum) o.fail(name, fmt::format("must be at least {}, got {}", minimum, value));
}

/// Bounds that keep memory and step arithmetic sane, checked before a value is used or narrowed.
void require_range(const Options& o, const char* name, std::int64_t value, std::int64_t least, std::int64_t most,
                   const std::string& hint = "") {
  if (value < least || value > most) o.fail(name, fmt::format("must lie in [{}, {}], got {}", least, most, value), hint);
}
}  // namespace

CoreSettings CoreSettings::from(Config& config) {
  config.check_top_level_keys(top_level_sections());
  CoreSettings s;
  auto section = [&](const char* name) {
    Options o = config.section(name, schema_of(name));
    return o;
  };

  Options run = section("run");
  s.run.name = run.has("name") ? run.string("name")
                               : std::filesystem::path(config.source_name()).stem().string();
  if (s.run.name.empty() || s.run.name == "." || s.run.name == ".." || std::ranges::count(s.run.name, '/') != 0)
    run.fail("name", fmt::format("'{}' is not usable as a folder name", shortened(s.run.name)));
  if (s.run.name.size() > 255)
    run.fail("name", fmt::format("'{}' is {} bytes; a folder name is at most 255", shortened(s.run.name),
                                 s.run.name.size()));
  s.run.output_dir = run.string("output_dir");
  s.run.seed = static_cast<std::uint64_t>(run.integer("seed"));
  s.run.log_level = run.string("log_level");

  Options trainer = section("trainer");
  s.trainer.max_steps = trainer.integer("max_steps");
  s.trainer.epochs = trainer.integer("epochs");
  s.trainer.log_every = trainer.integer("log_every");
  s.trainer.grad_clip = trainer.number("grad_clip");
  s.trainer.nan_guard = trainer.boolean("nan_guard");
  s.trainer.progress = trainer.string("progress");
  s.trainer.histogram_every = trainer.integer("histogram_every");
  require_positive(trainer, "histogram_every", s.trainer.histogram_every, 0);
  s.trainer.cpu_memory_cache_mb = trainer.integer("cpu_memory_cache_mb");
  require_range(trainer, "cpu_memory_cache_mb", s.trainer.cpu_memory_cache_mb, 0, kMaxCpuMemoryCacheMib);
  s.trainer.profile_steps = trainer.integer("profile_steps");
  s.trainer.profile_from = trainer.integer("profile_from");
  require_range(trainer, "profile_steps", s.trainer.profile_steps, 0, 100,
                "a trace holds every event of every step it records: a few steps show what a step costs");
  require_positive(trainer, "profile_from", s.trainer.profile_from);
  require_positive(trainer, "max_steps", s.trainer.max_steps, 0);
  if (s.trainer.profile_steps > 0 && s.trainer.max_steps > 0 && s.trainer.profile_from > s.trainer.max_steps)
    trainer.fail("profile_from",
                 fmt::format("the profiler would start at step {}, after the run's last step ({}): it would record "
                             "nothing", s.trainer.profile_from, s.trainer.max_steps),
                 fmt::format("set profile_from to at most {} (a step past the first few), or profile_steps: 0",
                             s.trainer.max_steps));
  require_range(trainer, "epochs", s.trainer.epochs, 1, kMaxEpochs);  // epochs x steps per epoch stays countable
  require_positive(trainer, "log_every", s.trainer.log_every);
  if (s.trainer.grad_clip < 0) trainer.fail("grad_clip", "must be 0 (off) or positive");

  Options optimizer = section("optimizer");
  s.optimizer.lr = optimizer.number("lr");
  const auto betas = optimizer.numbers("betas");
  if (betas.size() != 2 || betas[0] < 0 || betas[0] >= 1 || betas[1] < 0 || betas[1] >= 1)
    optimizer.fail("betas", "must be two numbers in [0, 1)", "for example [0.9, 0.999]");
  s.optimizer.beta1 = betas[0];
  s.optimizer.beta2 = betas[1];
  s.optimizer.eps = optimizer.number("eps");
  s.optimizer.weight_decay = optimizer.number("weight_decay");
  s.optimizer.implementation = optimizer.string("implementation");
  s.optimizer.state = optimizer.string("state") == "host" ? OptimizerStateHome::Host : OptimizerStateHome::Device;
  if (!(s.optimizer.lr > 0)) optimizer.fail("lr", "must be positive");
  s.optimizer.lr_scaling = optimizer.string("lr_scaling");
  s.optimizer.lr_reference_batch = optimizer.integer("lr_reference_batch");
  require_positive(optimizer, "lr_reference_batch", s.optimizer.lr_reference_batch, 0);

  Options ema = section("ema");
  s.ema.decay = ema.number("decay");
  if (!(s.ema.decay >= 0 && s.ema.decay < 1))
    ema.fail("decay", "must lie in [0, 1): 0 keeps no average", "0.99 to 0.9999 are usual");
  s.ema.start_step = ema.integer("start_step");
  require_positive(ema, "start_step", s.ema.start_step, 0);
  s.ema.groups = ema.strings("groups");
  s.ema.groups_where = ema.where("groups");
  if (s.ema.decay == 0)
    for (const char* key : {"start_step", "groups"})
      if (ema.given(key))
        ema.fail(key, "is set, but ema.decay is 0: no average is kept",
                 "set ema.decay (0.99 to 0.9999 are usual) to keep one, or remove the ema section");

  Options scheduler = section("scheduler");
  s.scheduler.warmup_steps = scheduler.integer("warmup_steps");
  s.scheduler.decay = scheduler.string("decay");
  s.scheduler.min_lr_ratio = scheduler.number("min_lr_ratio");
  require_positive(scheduler, "warmup_steps", s.scheduler.warmup_steps, 0);
  if (s.scheduler.min_lr_ratio < 0 || s.scheduler.min_lr_ratio > 1)
    scheduler.fail("min_lr_ratio", "must lie in [0, 1]");

  // The data section holds the core's keys and the data set plugin's options: the plugin checks
  // its own when the data set is built.
  std::vector<std::string> plugin_keys;
  for (const auto& key : config.keys_at("data"))
    if (std::ranges::none_of(schema_of("data"), [&](const OptionSpec& spec) { return spec.name == key; }))
      plugin_keys.push_back(key);
  Options data = config.section("data", schema_of("data"), plugin_keys);
  s.data.name = data.has("name") ? data.string("name") : config.has("data.path") ? "latent_shards" : "synthetic";
  s.data.batch_size = data.integer("batch_size");
  s.data.shuffle = data.boolean("shuffle");
  s.data.drop_last = data.boolean("drop_last");
  s.data.caption_dropout = data.number("caption_dropout");
  if (!(s.data.caption_dropout >= 0 && s.data.caption_dropout <= 1)) data.fail("caption_dropout", "must lie in [0, 1]");
  s.data.skip_bad_samples = data.string("on_bad_sample") == "skip";
  s.data.sample_log = data.boolean("sample_log");
  for (const auto& entry : data.strings("bucket_batch_size")) {
    const auto equals = entry.find('=');
    std::int64_t size = 0;
    try {
      if (equals == std::string::npos) throw Error("no '='");
      const Bucket bucket = Bucket::parse(entry.substr(0, equals));
      size = std::stoll(entry.substr(equals + 1));
      if (size < 1 || size > kMaxSamples) throw Error("size");
      s.data.bucket_batch_size.emplace_back(bucket.name(), size);
    } catch (const std::exception&) {
      data.fail("bucket_batch_size", fmt::format("'{}' is not \"FxHxW=N\" (a bucket and a batch size in [1, {}])",
                                                 shortened(entry), kMaxSamples),
                "for example \"21x60x104=1\"");
    }
  }
  // Checked before narrowing to int: 4294967297 must not become 1. Each worker holds up to
  // `prefetch` batches, so both stay small.
  const std::int64_t workers = data.integer("workers"), prefetch = data.integer("prefetch");
  require_range(data, "workers", workers, 0, kMaxWorkers,
                "0 makes batches on the training thread; a few workers per GPU are plenty");
  require_range(data, "prefetch", prefetch, 1, kMaxPrefetch);
  s.data.workers = static_cast<int>(workers);
  s.data.prefetch = static_cast<int>(prefetch);
  require_range(data, "batch_size", s.data.batch_size, 1, kMaxSamples);

  Options validation = section("validation");
  s.validation.every = validation.integer("every");
  s.validation.num_samples = validation.integer("num_samples");
  s.validation.batch_size = validation.integer("batch_size");
  s.validation.preview = validation.boolean("preview");
  s.validation.preview_samples = validation.integer("preview_samples");
  s.validation.preview_prompts = validation.string("preview_prompts");
  s.validation.at_start = validation.boolean("at_start");
  require_positive(validation, "every", s.validation.every, 0);
  require_range(validation, "num_samples", s.validation.num_samples, 1, kMaxSamples);
  require_range(validation, "batch_size", s.validation.batch_size, 0, kMaxSamples);
  require_range(validation, "preview_samples", s.validation.preview_samples, 1, 16);
  // A prompt set that no preview would read is a mistake in the config.
  if (!s.validation.preview_prompts.empty() && (s.validation.every == 0 || !s.validation.preview))
    validation.fail("preview_prompts", s.validation.every == 0 ? "no preview is made: validation.every is 0"
                                                               : "no preview is made: validation.preview is false",
                    "set validation.every (and preview: true) to preview them, or remove preview_prompts");
  if (s.validation.at_start && s.validation.every == 0)
    validation.fail("at_start", "nothing is validated: validation.every is 0",
                    "set validation.every to score (and preview) the held-out set as the run trains, or remove at_start");
  if (s.validation.batch_size == 0) s.validation.batch_size = s.data.batch_size;

  Options precision = section("precision");
  s.precision.mode = parse_precision(precision.string("mode"));
  s.precision.init_scale = precision.number("init_scale");
  s.precision.growth_factor = precision.number("growth_factor");
  s.precision.backoff_factor = precision.number("backoff_factor");
  s.precision.growth_interval = precision.integer("growth_interval");
  if (!(s.precision.init_scale > 0)) precision.fail("init_scale", "must be positive");
  if (!(s.precision.growth_factor > 1)) precision.fail("growth_factor", "must be above 1");
  if (!(s.precision.backoff_factor > 0 && s.precision.backoff_factor < 1))
    precision.fail("backoff_factor", "must lie in (0, 1)");
  require_positive(precision, "growth_interval", s.precision.growth_interval);

  Options checkpoint = section("checkpoint");
  s.checkpoint.every = checkpoint.integer("every");
  s.checkpoint.keep_last = checkpoint.integer("keep_last");
  require_positive(checkpoint, "every", s.checkpoint.every, 0);
  require_positive(checkpoint, "keep_last", s.checkpoint.keep_last, 0);

  Options block_swap = section("block_swap");
  s.block_swap.blocks = block_swap.integer("blocks");
  s.block_swap.ring = block_swap.integer("ring");
  s.block_swap.host_memory = block_swap.string("host_memory");
  require_positive(block_swap, "blocks", s.block_swap.blocks, 0);
  require_positive(block_swap, "ring", s.block_swap.ring);
  // More slots than streamed blocks would hold device memory that never receives a block: the ring
  // shrinks to the blocks (a user trying block counts keeps one ring setting); a ring the config
  // wrote is said once the run starts (place_model).
  if (s.block_swap.blocks > 0 && s.block_swap.ring > s.block_swap.blocks) {
    if (block_swap.given("ring")) s.block_swap.ring_written = s.block_swap.ring;
    s.block_swap.ring = s.block_swap.blocks;
  }
  for (Options* o : {&run, &trainer, &optimizer, &scheduler, &data, &validation, &precision, &checkpoint, &block_swap})
    config.record_resolved(*o);
  // The saved config names its run and finds its plugins from wherever it is run again.
  config.record_resolved_value("run.name", yaml_quoted(s.run.name));
  config.record_resolved_value("block_swap.ring", std::to_string(s.block_swap.ring));  // as clamped
  config.record_resolved_value("data.name", yaml_quoted(s.data.name));
  if (s.trainer.max_steps > 0) {  // the run's length is max_steps: epochs decides nothing
    config.omit_resolved("trainer.epochs");
    if (trainer.given("epochs"))
      config.note(fmt::format("trainer.epochs ({}) is not used: trainer.max_steps ({}) decides how long the run "
                              "trains, over as many epochs as it takes; set max_steps: 0 to train whole epochs",
                              s.trainer.epochs, s.trainer.max_steps));
  }

  if (config.has("plugin_path")) {
    const std::size_t n = config.sequence_size("plugin_path");
    const auto base = std::filesystem::path(config.source_name()).parent_path();
    for (std::size_t i = 0; i < n; ++i) {
      std::filesystem::path p = config.string_at("plugin_path." + std::to_string(i));
      s.plugin_path.push_back(std::filesystem::absolute(p.is_absolute() ? p : base / p).lexically_normal());
    }
    std::string list;
    for (const auto& p : s.plugin_path) list += (list.empty() ? "" : ", ") + yaml_quoted(p.string());
    config.record_resolved_value("plugin_path", "[" + list + "]");
  }
  return s;
}

}  // namespace wanfw
