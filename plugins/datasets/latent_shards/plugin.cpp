// The `latent_shards` data set: a folder of latents and text embeddings encoded once
// (tools/encode_dataset.py or `wanfw data synth`), read through its manifest.

#include <algorithm>

#include <fmt/format.h>

#include "latent_shards/latent_dataset.hpp"
#include "wanfw/error.hpp"
#include "wanfw/plugin.hpp"

namespace {

std::unique_ptr<wanfw::Dataset> make(const wanfw::Options& options, const wanfw::PluginContext& context) {
  // Relative folders are taken from where wanfw runs, like every other path on the command line.
  const std::filesystem::path path = options.string("path");
  if (path.empty()) options.fail("path", "names no folder", "set data.path to a folder holding manifest.json");
  const std::filesystem::path validation = options.string("validation_path");
  try {
    return std::make_unique<wanfw::LatentShardDataset>(path, context.fields, validation, options.boolean("checksums"));
  } catch (const wanfw::FileError& e) {
    options.fail("path", e.what());
  }
}

/// The buckets of the folder's manifest, in the order samples first use them; none while the
/// folder has no manifest (a config written before its data set).
std::vector<wanfw::Bucket> buckets_of(const wanfw::Options& options) {
  const std::filesystem::path path = options.string("path");
  std::vector<wanfw::Bucket> buckets;
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path / wanfw::DatasetManifest::kFileName, ec)) return buckets;
  try {
    for (const auto& sample : wanfw::DatasetManifest::read(path).samples)
      if (std::find(buckets.begin(), buckets.end(), sample.bucket) == buckets.end()) buckets.push_back(sample.bucket);
  } catch (const wanfw::FileError& e) {
    options.fail("path", e.what());
  }
  return buckets;
}

wanfw::PluginDescriptor describe() {
  using T = wanfw::OptionType;
  auto d = wanfw::PluginDescriptor::for_dataset(
      "latent_shards", "1.0.0", "Cached latents and text embeddings: a folder of safetensors shards and a manifest.");
  d.options = {
      wanfw::option("path", T::String).required().doc("The data set folder (holding manifest.json)."),
      wanfw::option("validation_path", T::String)
          .value("\"\"")
          .doc("A held-out data set folder scored at each validation (its first validation.num_samples samples)."),
      wanfw::option("checksums", T::Boolean)
          .value("true")
          .doc("Check each shard's CRC-32 when a process first opens it (one read of the shard); `wanfw data verify` "
               "checks every shard and sample ahead of time."),
  };
  d.make_dataset = make;
  d.data_buckets = buckets_of;
  return d;
}

}  // namespace

WANFW_PLUGIN(Dataset, describe)
