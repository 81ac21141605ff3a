// Fuzz target: a sharded checkpoint's .safetensors.index.json. The input is the index; it sits in
// a folder with two real shards (and a third in a subfolder). Opening either fails with wanfw's
// FileError or every tensor it lists resolves to a file inside the folder and can be read.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <stdlib.h>

#include <ATen/ATen.h>

#include "fuzz_folder.hpp"
#include "fuzz_target.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace {

/// A fresh folder with the shards an index may name.
struct ShardFolder : FuzzFolder {
  ShardFolder();
};

ShardFolder::ShardFolder() : FuzzFolder("wanfw-fuzz-index") {
  const fs::path& folder = path;
  fs::create_directories(folder / "sub");
  wanfw::write_safetensors(folder / "model-00001-of-00002.safetensors",
                           {{"a.weight", at::arange(6, at::kFloat).reshape({2, 3})}, {"a.bias", at::zeros({3})}});
  wanfw::write_safetensors(folder / "model-00002-of-00002.safetensors", {{"b.weight", at::ones({4}, at::kBFloat16)}});
  wanfw::write_safetensors(folder / "sub" / "extra.safetensors", {{"c", at::ones({1}, at::kLong)}});
}

}  // namespace

WANFW_FUZZ_TARGET(sharded_index) {
  static const ShardFolder shards;
  const fs::path& folder = shards.path;
  const fs::path index = folder / "model.safetensors.index.json";
  {
    std::ofstream out(index, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const wanfw::SafetensorsCheckpoint checkpoint = wanfw::SafetensorsCheckpoint::open(index);
    for (const std::string& name : checkpoint.names()) {
      if (!shards.holds(checkpoint.file_of(name))) std::abort();  // an index may only name its own folder
      try {
        (void)checkpoint.tensor(name).sum();
      } catch (const wanfw::FileError&) {  // a shard that does not hold the tensor, or is no shard
      }
    }
  } catch (const wanfw::FileError&) {
  }
  return 0;
}
