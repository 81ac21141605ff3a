// The data set of a folder: the manifest's samples, their tensors memory-mapped from the shards.

#include <algorithm>
#include <mutex>
#include <set>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "file_checksum.hpp"
#include "latent_shards/latent_dataset.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {
const char* kVerifyHint = "run `wanfw data verify` on the folder; re-encode what it names, or set "
                          "data.on_bad_sample: skip to train without it";
}

/// Shards are opened (CRC-checked, mapped, their headers checked) on first use, once, by any
/// worker; a worker opening one shard holds up only the workers that need that shard.
struct LatentShardDataset::Shards {
  struct Slot {
    std::mutex mutex;
    std::shared_ptr<const SafetensorsFile> file;
  };
  std::mutex mutex;  ///< guards `slots` alone
  std::map<std::string, std::shared_ptr<Slot>> slots;
};

LatentShardDataset::LatentShardDataset(fs::path folder, std::vector<FieldSpec> fields, fs::path validation_folder,
                                       bool checksums)
    : folder_(std::move(folder)),
      validation_folder_(std::move(validation_folder)),
      fields_(std::move(fields)),
      manifest_(DatasetManifest::read(folder_)),
      checksums_(checksums),
      shards_(std::make_unique<Shards>()) {
  // A truncated or replaced shard is named before training starts; its contents are checked
  // (CRC-32, values) by `wanfw data verify`.
  std::map<std::string, std::vector<std::string>> samples_in;
  for (const auto& sample : manifest_.samples)
    for (const auto& [field, where] : sample.fields) {
      auto& ids = samples_in[where.shard];
      if (ids.size() < 3 && (ids.empty() || ids.back() != sample.id)) ids.push_back(sample.id);
    }
  for (const auto& shard : manifest_.shards) {
    const fs::path path = folder_ / shard.file;
    std::error_code ec;
    const auto bytes = fs::file_size(path, ec);
    const std::string holding = samples_in.count(shard.file)
                                    ? fmt::format(" (it holds samples {}{})", fmt::join(samples_in[shard.file], ", "),
                                                  samples_in[shard.file].size() == 3 ? ", ..." : "")
                                    : "";
    if (ec)
      throw FileError(fmt::format("{}: the shard listed by the manifest cannot be read: {}{}", path.string(),
                                  ec.message(), holding),
                      "restore the file, or re-encode the data set");
    if (bytes != shard.bytes)
      throw FileError(fmt::format("{}: {} bytes, but the manifest says {}: truncated or replaced{}", path.string(), bytes,
                                  shard.bytes, holding),
                      "re-encode the data set (tools/encode_dataset.py re-encodes only what is missing)");
  }
  std::set<Bucket> distinct;
  for (const auto& sample : manifest_.samples) distinct.insert(sample.bucket);
  buckets_.assign(distinct.begin(), distinct.end());
  bucket_of_.reserve(manifest_.samples.size());
  for (const auto& sample : manifest_.samples)
    bucket_of_.push_back(std::lower_bound(buckets_.begin(), buckets_.end(), sample.bucket) - buckets_.begin());
}

LatentShardDataset::~LatentShardDataset() = default;

std::int64_t LatentShardDataset::size() const {
  const auto n = static_cast<std::int64_t>(manifest_.samples.size());
  return max_samples_ > 0 ? std::min(n, max_samples_) : n;
}

std::int64_t LatentShardDataset::bucket_of(std::int64_t index) const {
  return bucket_of_.at(static_cast<std::size_t>(index));
}

std::string LatentShardDataset::describe_sample(std::int64_t index) const {
  const auto& sample = manifest_.samples.at(static_cast<std::size_t>(index));
  const auto latents = sample.fields.find("latents");
  const auto& any = latents != sample.fields.end() ? latents : sample.fields.begin();
  return any == sample.fields.end()
             ? fmt::format("sample '{}' of {}", sample.id, folder_.string())
             : fmt::format("sample '{}' ({})", sample.id, (folder_ / any->second.shard).string());
}

at::Tensor LatentShardDataset::read(const ManifestTensor& where, const std::string& field,
                                    const std::function<std::string()>& owner) const {
  std::shared_ptr<Shards::Slot> slot;
  {
    std::lock_guard<std::mutex> lock(shards_->mutex);
    auto& entry = shards_->slots[where.shard];
    if (!entry) entry = std::make_shared<Shards::Slot>();
    slot = entry;
  }
  std::shared_ptr<const SafetensorsFile> file;
  {
    std::lock_guard<std::mutex> lock(slot->mutex);
    if (!slot->file) {
      try {
        const fs::path path = folder_ / where.shard;
        if (checksums_) {
          const auto listed = std::find_if(manifest_.shards.begin(), manifest_.shards.end(),
                                           [&](const ManifestShard& s) { return s.file == where.shard; });
          const FileChecksum sum = file_checksum(path);
          if (sum.crc32 != listed->crc32 || sum.bytes != listed->bytes)
            throw FileError(fmt::format("{}: CRC-32 {:08x} of {} bytes, but the manifest says {:08x} of {}: the file is "
                                        "corrupt",
                                        path.string(), sum.crc32, sum.bytes, listed->crc32, listed->bytes));
        }
        slot->file = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
      } catch (const FileError& e) {
        throw DataError(fmt::format("{}, field '{}': its shard is unreadable: {}", owner(), field, e.what()), kVerifyHint);
      }
    }
    file = slot->file;
  }
  if (!file->contains(where.tensor))
    throw DataError(fmt::format("{}, field '{}': {} has no tensor '{}'", owner(), field,
                                (folder_ / where.shard).string(), shortened(where.tensor)),
                    kVerifyHint);
  at::Tensor tensor = file->tensor(where.tensor);
  if (tensor.sizes() != at::IntArrayRef(where.shape))
    throw DataError(fmt::format("{}, field '{}': tensor '{}' has shape [{}], but the manifest says [{}]", owner(), field,
                                shortened(where.tensor), fmt::join(tensor.sizes(), ", "), fmt::join(where.shape, ", ")),
                    kVerifyHint);
  return tensor;
}

Sample LatentShardDataset::get(std::int64_t index) const {
  if (index < 0 || index >= size())
    throw DataError(fmt::format("sample {} is outside {} ({} samples)", index, folder_.string(), size()));
  const auto& sample = manifest_.samples[static_cast<std::size_t>(index)];
  const auto owner = [&] { return describe_sample(index); };  // formatted for messages only
  Sample out;
  if (fields_.empty()) {
    for (const auto& [field, where] : sample.fields) out.emplace(field, read(where, field, owner));
    return out;
  }
  for (const auto& field : fields_) {
    const auto it = sample.fields.find(field.name);
    if (it == sample.fields.end()) {
      std::vector<std::string> present;
      for (const auto& [name, _] : sample.fields) present.push_back(name);
      const bool text = !field.shape.empty() && field.shape.front() == dim::tokens;
      throw DataError(fmt::format("{}: the manifest gives no '{}'{} (it has: {})", owner(), field.name,
                                  text ? " (text embedding)" : "", fmt::join(present, ", ")),
                      "the model needs every field it declares; re-encode the data set with them");
    }
    out.emplace(field.name, read(it->second, field.name, owner));
  }
  return out;
}

Sample LatentShardDataset::empty_caption() const {
  Sample out;
  for (const auto& [field, where] : manifest_.empty_caption)
    out.emplace(field, read(where, field, [&] { return fmt::format("the empty prompt of {}", folder_.string()); }));
  return out;
}

std::shared_ptr<Dataset> LatentShardDataset::validation_set(std::int64_t max_samples, std::uint64_t) const {
  if (validation_folder_.empty()) return nullptr;
  auto set = std::make_shared<LatentShardDataset>(validation_folder_, fields_, fs::path(), checksums_);
  set->max_samples_ = max_samples;
  return set;
}

std::string LatentShardDataset::summary() const {
  std::uint64_t bytes = 0;
  for (const auto& shard : manifest_.shards) bytes += shard.bytes;
  return fmt::format("{} samples from {} in {} bucket(s), {} shard(s), {:.1f} MB", size(), folder_.string(),
                     buckets_.size(), manifest_.shards.size(), static_cast<double>(bytes) / 1e6);
}

}  // namespace wanfw
