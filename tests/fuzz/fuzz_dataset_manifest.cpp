// Fuzz target: a data set folder's manifest.json. The input is the manifest; it sits in a folder
// with one real shard (two samples in two buckets, a shared caption, the empty prompt), written by
// wanfw's own DatasetWriter. Opening the folder fails with a FileError, or every sample it lists
// either loads (its tensors inside the folder, with the manifest's shapes) or fails with a
// DataError naming it. WANFW_FUZZ_PRINT_MANIFEST=1 prints the folder's own manifest (the seed).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <stdlib.h>

#include <ATen/ATen.h>

#include "fuzz_folder.hpp"
#include "fuzz_target.hpp"
#include "latent_shards/latent_dataset.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace {

/// A fresh data set folder.
struct DatasetFolder : FuzzFolder {
  DatasetFolder();
};

DatasetFolder::DatasetFolder() : FuzzFolder("wanfw-fuzz-dataset") {
  wanfw::DatasetWriter writer(path, {{"vae", "fuzz"}}, "fuzz");
  const auto latents = [](std::int64_t f, double start) {
    return at::arange(start, start + 2.0 * f * 16, at::kFloat).reshape({2, f, 4, 4}).to(at::kBFloat16);
  };
  const at::Tensor text = at::arange(12, at::kFloat).reshape({3, 4}).to(at::kBFloat16);
  writer.add("a", {1, 4, 4}, "one caption", {{"latents", latents(1, 0)}}, {{"context", text}});
  writer.add("b", {2, 4, 4}, "one caption", {{"latents", latents(2, 100)}}, {{"context", text}});
  writer.set_empty_caption({{"context", at::zeros({1, 4}, at::kBFloat16)}});
  writer.finish();
  if (std::getenv("WANFW_FUZZ_PRINT_MANIFEST") != nullptr) {
    std::ifstream in(path / wanfw::DatasetManifest::kFileName);
    std::stringstream text_out;
    text_out << in.rdbuf();
    std::fputs(text_out.str().c_str(), stdout);
  }
}

}  // namespace

WANFW_FUZZ_TARGET(dataset_manifest) {
  static const DatasetFolder dataset;
  const fs::path& folder = dataset.path;
  {
    std::ofstream out(folder / wanfw::DatasetManifest::kFileName, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  wanfw::FieldSpec latents{"latents", {2, wanfw::dim::frames, wanfw::dim::height, wanfw::dim::width}};
  wanfw::FieldSpec context{"context", {wanfw::dim::tokens, 4}};
  context.max_tokens = 8;
  try {
    const wanfw::LatentShardDataset set(folder, {latents, context});
    for (const auto& shard : set.manifest().shards)
      if (!dataset.holds(folder / shard.file)) std::abort();  // a manifest may only name its own folder
    for (std::int64_t i = 0; i < set.size(); ++i) {
      const wanfw::Bucket& bucket = set.buckets().at(static_cast<std::size_t>(set.bucket_of(i)));
      try {
        const wanfw::Sample sample =
            wanfw::conform_sample(set.get(i), {latents, context}, bucket, set.describe_sample(i));
        (void)sample.at("latents").sum();
      } catch (const wanfw::DataError&) {
      }
    }
    try {
      (void)set.empty_caption();
    } catch (const wanfw::DataError&) {
    }
  } catch (const wanfw::FileError&) {
  }
  return 0;
}
