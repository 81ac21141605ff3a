// `wanfw data verify`: every shard and every sample of a data set folder, checked.

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "file_checksum.hpp"
#include "latent_shards/latent_dataset.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace wanfw {

VerifyReport verify_dataset(const fs::path& folder,
                            const std::function<void(std::int64_t, std::int64_t)>& progress) {
  const DatasetManifest manifest = DatasetManifest::read(folder);
  VerifyReport report;
  report.samples = static_cast<std::int64_t>(manifest.samples.size());
  report.shards = static_cast<std::int64_t>(manifest.shards.size());
  auto& problems = report.problems;

  // Shards: size, checksum, a valid safetensors file.
  std::map<std::string, std::shared_ptr<const SafetensorsFile>> files;
  for (std::size_t i = 0; i < manifest.shards.size(); ++i) {
    const auto& shard = manifest.shards[i];
    const fs::path path = folder / shard.file;
    if (progress) progress(static_cast<std::int64_t>(i), report.shards);
    try {
      const FileChecksum sum = file_checksum(path);
      report.bytes += static_cast<std::int64_t>(sum.bytes);
      if (sum.bytes != shard.bytes) {
        problems.push_back(fmt::format("{}: {} bytes, but the manifest says {}: truncated or replaced", path.string(),
                                       sum.bytes, shard.bytes));
        continue;
      }
      if (sum.crc32 != shard.crc32) {
        problems.push_back(fmt::format("{}: CRC-32 {:08x}, but the manifest says {:08x}: the file is corrupt",
                                       path.string(), sum.crc32, shard.crc32));
        continue;
      }
      files[shard.file] = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  if (progress) progress(report.shards, report.shards);

  // Samples: every tensor where the manifest says, with its shape, finite; latents in the bucket.
  auto check = [&](const std::string& owner, const std::string& field, const ManifestTensor& where) {
    const auto file = files.find(where.shard);
    if (file == files.end()) {
      problems.push_back(fmt::format("{}, field '{}': its shard {} is unusable (above)", owner, field, where.shard));
      return at::Tensor();
    }
    if (!file->second->contains(where.tensor)) {
      problems.push_back(fmt::format("{}, field '{}': {} has no tensor '{}'", owner, field, where.shard, where.tensor));
      return at::Tensor();
    }
    const at::Tensor tensor = file->second->tensor(where.tensor);
    if (tensor.sizes() != at::IntArrayRef(where.shape)) {
      problems.push_back(fmt::format("{}, field '{}': shape [{}], but the manifest says [{}]", owner, field,
                                     fmt::join(tensor.sizes(), ", "), fmt::join(where.shape, ", ")));
      return at::Tensor();
    }
    if (at::isFloatingType(tensor.scalar_type())) {
      const auto bad = (~at::isfinite(tensor)).sum().item<std::int64_t>();
      if (bad > 0)
        problems.push_back(fmt::format("{}, field '{}': {} NaN or infinite value(s) of {}", owner, field, bad,
                                       tensor.numel()));
    }
    return tensor;
  };
  std::map<std::string, bool> checked_text;  // a caption's tensors are shared by its samples
  for (const auto& sample : manifest.samples) {
    const std::string owner = fmt::format("sample '{}'", sample.id);
    for (const auto& [field, where] : sample.fields) {
      const std::string key = where.shard + "\n" + where.tensor;
      if (checked_text.count(key)) continue;
      checked_text[key] = true;
      const at::Tensor tensor = check(owner, field, where);
      if (field == "latents" && tensor.defined() &&
          (tensor.dim() != 4 || tensor.size(1) != sample.bucket.frames || tensor.size(2) != sample.bucket.height ||
           tensor.size(3) != sample.bucket.width))
        problems.push_back(fmt::format("{}: latents [{}] are not in its bucket {}", owner, fmt::join(tensor.sizes(), ", "),
                                       sample.bucket.name()));
    }
  }
  for (const auto& [field, where] : manifest.empty_caption) check("the empty prompt", field, where);
  return report;
}

}  // namespace wanfw
