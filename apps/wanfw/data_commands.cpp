// `wanfw data`: make, inspect and verify data set folders.

#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "sampling/bucket_sampler.hpp"
#include "data/data_loader.hpp"
#include "latent_shards/latent_dataset.hpp"
#include "synthetic/synthetic_dataset.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace wanfw::cli {

namespace {

[[noreturn]] void usage(const std::string& problem) {
  throw ConfigError({"command line", 0, 0}, problem, fmt::format("\n{}", kDataHelp));
}

/// Flags of the form --name VALUE after the folder; `flags` holds the defaults.
fs::path parse(const std::vector<std::string>& args, std::map<std::string, std::string>& flags,
               const std::set<std::string>& switches = {}) {
  fs::path folder;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (switches.count(a)) {
      flags[a] = std::string(1, '1');
    } else if (flags.count(a)) {
      if (i + 1 >= args.size()) usage(fmt::format("{} needs a value", a));
      flags[a] = args[++i];
    } else if (a.starts_with("--")) {
      usage(fmt::format("unknown option '{}'", a));
    } else if (folder.empty()) {
      folder = a;
    } else {
      usage(fmt::format("unexpected argument '{}'", a));
    }
  }
  if (folder.empty()) usage(fmt::format("wanfw data {} needs a folder", args[0]));
  return folder;
}

std::int64_t integer(const std::map<std::string, std::string>& flags, const std::string& name, std::int64_t least,
                     std::int64_t most) {
  const std::string& text = flags.at(name);
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty() || value < least || value > most)
    usage(fmt::format("{} must be an integer in [{}, {}], got '{}'", name, least, most, shortened(text)));
  return value;
}

std::vector<Bucket> buckets_of(const std::string& list) {
  std::vector<Bucket> buckets;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    try {
      buckets.push_back(Bucket::parse(list.substr(start, comma - start)));
    } catch (const Error& e) {
      usage(fmt::format("--buckets: {}", e.what()));
    }
    start = comma + 1;
  }
  return buckets;
}

/// The VACE control mode's context of `latents` [C, F, H, W] in `channels` channels, the model's
/// vace_context: inactive 0 and reactive the latents (C each), the mask's channels (the rest) 1.
at::Tensor control_context(const at::Tensor& latents, std::int64_t channels) {
  const std::int64_t mask = channels - 2 * latents.size(0);
  return at::cat({at::zeros_like(latents), latents, at::ones_like(latents).narrow(0, 0, 1).expand({mask, -1, -1, -1})});
}

int synth(const std::vector<std::string>& args) {
  std::map<std::string, std::string> flags = {{"--samples", "64"},   {"--buckets", "2x8x8,3x8x12"}, {"--channels", "4"},
                                              {"--text-dim", "32"},  {"--max-tokens", "16"},        {"--seed", "0"},
                                              {"--shard-mb", "256"}, {"--image-condition", "0"}, {"--vace", "0"}};
  const fs::path folder = parse(args, flags, {"--image-condition"});
  const std::int64_t samples = integer(flags, "--samples", 1, 10'000'000);
  const std::int64_t channels = integer(flags, "--channels", 1, 4096);
  const std::int64_t text_dim = integer(flags, "--text-dim", 1, 65536);
  const std::int64_t max_tokens = integer(flags, "--max-tokens", 2, 4096);
  const auto seed = static_cast<std::uint64_t>(integer(flags, "--seed", 0, INT64_MAX));
  const std::int64_t shard_bytes = integer(flags, "--shard-mb", 1, 1 << 20) << 20;
  // The model's vace_context channels (model-info: "vace_context [72, frames, height, width]"):
  // both latent copies and at least one mask channel.
  const std::int64_t vace = integer(flags, "--vace", 0, 65536);
  if (vace != 0 && vace <= 2 * channels)
    usage(fmt::format("--vace {} leaves no mask channel beside 2 x {} latent channels; give the vace_context "
                      "channels `wanfw model-info` shows for the model (72 for tiny-vace)", vace, channels));
  const std::vector<Bucket> buckets = buckets_of(flags.at("--buckets"));
  std::error_code ec;
  if (fs::exists(folder / DatasetManifest::kFileName, ec))
    usage(fmt::format("{} already holds a data set; choose an empty folder", folder.string()));

  FieldSpec latents{"latents", {channels, dim::frames, dim::height, dim::width}};
  FieldSpec context{"context", {dim::tokens, text_dim}};
  context.max_tokens = max_tokens;
  SyntheticDataset::Options options;
  options.size = samples;
  options.seed = seed;
  options.buckets = buckets;
  options.patterns = true;
  std::vector<FieldSpec> fields = {latents, context};
  const bool image_condition = flags.at("--image-condition") == "1";
  if (image_condition) fields.push_back({"image_condition", latents.shape});
  const SyntheticDataset data(fields, options);

  DatasetWriter writer(folder, {{"vae", "synthetic"}, {"text_encoder", "synthetic"}},
                       fmt::format("synthetic seed {} channels {} text {}", seed, channels, text_dim), shard_bytes);
  for (std::int64_t i = 0; i < samples; ++i) {
    const Sample sample = data.get(i);
    const std::int64_t pattern = data.pattern_of(i);
    // Each caption its own length: batches pad text, as real captions do.
    const std::int64_t tokens = std::max<std::int64_t>(2, max_tokens - pattern);
    Sample own = {{"latents", sample.at("latents").to(at::kBFloat16)}};
    if (image_condition) own["image_condition"] = sample.at("image_condition").to(at::kBFloat16);
    if (vace > 0) own["vace_context"] = control_context(sample.at("latents"), vace).to(at::kBFloat16);
    writer.add(fmt::format("synth_{:06d}", i), buckets[static_cast<std::size_t>(data.bucket_of(i))],
               fmt::format("synthetic pattern {}", pattern), own,
               {{"context", sample.at("context").narrow(0, 0, tokens).to(at::kBFloat16)}}, fmt::format("synthetic {}", i));
  }
  writer.set_empty_caption({{"context", data.empty_caption().at("context").to(at::kBFloat16)}});
  const DatasetManifest manifest = writer.finish();
  std::printf("wrote %lld samples in %zu bucket(s), %zu shard(s) to %s\n", static_cast<long long>(samples),
              buckets.size(), manifest.shards.size(), folder.string().c_str());
  return kSuccess;
}

int inspect(const std::vector<std::string>& args) {
  std::map<std::string, std::string> flags = {{"--batch-size", "1"}, {"--world-size", "1"}, {"--accumulation", "1"},
                                              {"--keep-last", "0"}};
  const fs::path folder = parse(args, flags, {"--keep-last"});
  const LatentShardDataset data(folder, {});
  const DatasetManifest& m = data.manifest();
  std::uint64_t bytes = 0;
  for (const auto& shard : m.shards) bytes += shard.bytes;
  std::set<std::string> captions;
  for (const auto& sample : m.samples) captions.insert(sample.caption_hash);
  std::printf("%s: %zu samples, %zu distinct captions, %zu shard(s), %.1f MB\n", folder.string().c_str(),
              m.samples.size(), captions.size(), m.shards.size(), static_cast<double>(bytes) / 1e6);
  if (m.samples.empty())  // a set a run would refuse: not a success
    throw DataError(fmt::format("{} holds no sample: a run has nothing to train on", folder.string()),
                    "tools/encode_dataset.py lists the items it did not encode and the bucket that would take each "
                    "(docs/data.md: buckets)");
  for (const auto& [role, name] : m.encoders) std::printf("  encoder %s: %s\n", role.c_str(), name.c_str());
  if (!m.encoding_fingerprint.empty()) std::printf("  encoding: %s\n", m.encoding_fingerprint.c_str());
  std::printf("  empty prompt: %s\n", m.empty_caption.empty() ? "none (no caption dropout)" : "stored");
  std::map<std::int64_t, std::size_t> references;  // VACE: latent frames of reference images -> samples
  for (const auto& sample : m.samples)
    if (sample.reference_frames > 0) ++references[sample.reference_frames];
  for (const auto& [frames, count] : references)
    std::printf("  reference images: %zu sample(s) begin with %lld latent frame(s) of them\n", count,
                static_cast<long long>(frames));

  // Fields: shapes by bucket (tokens as a range), dtypes from the shard headers.
  std::map<std::string, std::string> dtypes;
  std::map<std::string, std::array<std::int64_t, 3>> tokens;  // a text field's fewest and most tokens, its width
  for (const auto& sample : m.samples)
    for (const auto& [field, where] : sample.fields) {
      if (!dtypes.count(field)) {
        const auto file = SafetensorsFile::open(folder / where.shard);
        dtypes[field] = file.contains(where.tensor) ? file.record(where.tensor).dtype_name : "?";
      }
      if (where.shape.size() == 2) {
        auto [it, fresh] = tokens.emplace(field, std::array{where.shape[0], where.shape[0], where.shape[1]});
        it->second[0] = std::min(it->second[0], where.shape[0]);
        it->second[1] = std::max(it->second[1], where.shape[0]);
      }
    }
  for (const auto& [field, dtype] : dtypes) {
    if (const auto text = tokens.find(field); text != tokens.end())
      std::printf("  field %s: %s, [%lld..%lld tokens, %lld]\n", field.c_str(), dtype.c_str(),
                  static_cast<long long>(text->second[0]), static_cast<long long>(text->second[1]),
                  static_cast<long long>(text->second[2]));
    else
      std::printf("  field %s: %s, one shape per bucket\n", field.c_str(), dtype.c_str());
  }
  BucketSampler::Options plan;
  plan.batch_size = integer(flags, "--batch-size", 1, 1'000'000);
  plan.world_size = static_cast<int>(integer(flags, "--world-size", 1, 1'000'000));
  plan.accumulation = static_cast<int>(integer(flags, "--accumulation", 1, 1'000'000));
  plan.drop_last = flags.at("--keep-last") != "1";
  std::printf("bucket plan for batch %lld per device x %d process(es) x %d accumulation:\n",
              static_cast<long long>(plan.batch_size), plan.world_size, plan.accumulation);
  try {
    for (const auto& line : BucketSampler(data, plan).describe()) std::printf("  %s\n", line.c_str());
  } catch (const DataError& e) {
    std::printf("  %s\n", e.what());
  }
  return kSuccess;
}

int verify(const std::vector<std::string>& args) {
  std::map<std::string, std::string> flags;
  const fs::path folder = parse(args, flags);
  const VerifyReport report = verify_dataset(folder, [](std::int64_t done, std::int64_t total) {
    if (done < total) spdlog::info("checking shard {}/{}", done + 1, total);
  });
  for (const auto& problem : report.problems) std::printf("%s\n", problem.c_str());
  if (!report.problems.empty()) {
    std::printf("%s: %zu problem(s) in %lld samples, %lld shard(s)\n", folder.string().c_str(), report.problems.size(),
                static_cast<long long>(report.samples), static_cast<long long>(report.shards));
    return kFailure;
  }
  std::printf("%s: ok: %lld samples, %lld shard(s), %.1f MB, every checksum, shape and value sound\n",
              folder.string().c_str(), static_cast<long long>(report.samples), static_cast<long long>(report.shards),
              static_cast<double>(report.bytes) / 1e6);
  return kSuccess;
}

int throughput(const std::vector<std::string>& args) {
  std::map<std::string, std::string> flags = {{"--workers", "2"}, {"--prefetch", "2"}, {"--batch-size", "1"},
                                              {"--epochs", "1"}, {"--for-gpu", "0"}};
  const fs::path folder = parse(args, flags, {"--for-gpu"});
  const bool for_gpu = flags.at("--for-gpu") == "1";
  // The fields as a model would declare them: each sample's own tensors by bucket, text by tokens.
  const DatasetManifest manifest = DatasetManifest::read(folder);
  if (manifest.samples.empty()) usage(fmt::format("{} holds no samples", folder.string()));
  std::vector<FieldSpec> fields;
  for (const auto& [name, where] : manifest.samples.front().fields) {
    FieldSpec field{name, where.shape};
    if (where.shape.size() == 4) field.shape = {where.shape[0], dim::frames, dim::height, dim::width};
    if (where.shape.size() == 2) field.shape = {dim::tokens, where.shape[1]};
    fields.push_back(field);
  }
  auto reader = std::make_shared<LatentShardDataset>(folder, fields);
  BucketSampler::Options plan;
  plan.batch_size = integer(flags, "--batch-size", 1, 1'000'000);
  plan.drop_last = false;
  auto sampler = std::make_shared<BucketSampler>(*reader, plan);
  DataLoader::Options options;
  options.workers = static_cast<int>(integer(flags, "--workers", 0, 256));
  options.prefetch = static_cast<int>(integer(flags, "--prefetch", 1, 64));
  options.fields = fields;
  options.convert = !for_gpu;
  options.pin_memory = for_gpu && at::hasCUDA();
  DataLoader loader(reader, sampler, options);
  const std::int64_t epochs = integer(flags, "--epochs", 1, 1000);
  std::int64_t samples = 0;
  const auto started = std::chrono::steady_clock::now();
  for (std::int64_t epoch = 0; epoch < epochs; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) samples += batch->size;
  }
  double stored_bytes = 0;  // every sample is read each epoch (drop_last off), so every shard byte
  for (const auto& shard : reader->manifest().shards) stored_bytes += static_cast<double>(shard.bytes) * epochs;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("%lld samples in %.3f s: %.1f samples/s, %.1f MB/s of shards (%d workers, batch %lld, %s)\n",
              static_cast<long long>(samples), seconds, static_cast<double>(samples) / seconds, stored_bytes / 1e6 / seconds,
              options.workers, static_cast<long long>(plan.batch_size),
              for_gpu ? (options.pin_memory ? "for a GPU: stored dtype, pinned" : "for a GPU: stored dtype, unpinned: no CUDA here")
                      : "for the CPU: converted to float32");
  return kSuccess;
}

}  // namespace

int data_command(const std::vector<std::string>& args) {
  if (args.empty()) usage("wanfw data needs a subcommand: synth, inspect or verify");
  if (args[0] == "synth") return synth(args);
  if (args[0] == "inspect") return inspect(args);
  if (args[0] == "verify") return verify(args);
  if (args[0] == "throughput") return throughput(args);
  usage(fmt::format("unknown data subcommand '{}'", shortened(args[0])));
}

}  // namespace wanfw::cli
