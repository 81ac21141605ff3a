// Writes data set folders: samples packed into safetensors shards, then the manifest.

#include <fstream>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "file_checksum.hpp"
#include "latent_shards/latent_dataset.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace wanfw {

std::string caption_hash(const std::string& caption) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, 64 bits, over the UTF-8 bytes
  for (const char c : caption) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return fmt::format("{:016x}", h);
}

struct DatasetWriter::Pending {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata;  ///< "caption/<hash>" -> caption text
  std::int64_t bytes = 0;
  std::string file;
};

DatasetWriter::DatasetWriter(fs::path folder, std::map<std::string, std::string> encoders,
                             std::string encoding_fingerprint, std::int64_t shard_bytes)
    : folder_(std::move(folder)), shard_bytes_(shard_bytes), pending_(std::make_unique<Pending>()) {
  manifest_.encoders = std::move(encoders);
  manifest_.encoding_fingerprint = std::move(encoding_fingerprint);
  std::error_code ec;
  fs::create_directories(folder_ / "shards", ec);
  if (ec) throw FileError(fmt::format("cannot create {}: {}", (folder_ / "shards").string(), ec.message()));
}

DatasetWriter::~DatasetWriter() = default;

ManifestTensor DatasetWriter::store(const std::string& name, const at::Tensor& tensor) {
  if (pending_->file.empty()) pending_->file = fmt::format("shards/shard-{:05d}.safetensors", manifest_.shards.size());
  const at::Tensor value = tensor.contiguous().cpu();
  pending_->tensors.emplace_back(name, value);
  pending_->bytes += static_cast<std::int64_t>(value.nbytes());
  return ManifestTensor{pending_->file, name, value.sizes().vec()};
}

const std::map<std::string, ManifestTensor>& DatasetWriter::store_caption(const std::string& caption,
                                                                          const Sample& fields) {
  const std::string hash = caption_hash(caption);
  auto known = captions_.find(hash);
  if (known != captions_.end()) return known->second;
  std::map<std::string, ManifestTensor> stored;
  for (const auto& [field, tensor] : fields) stored[field] = store(fmt::format("{}/caption-{}", field, hash), tensor);
  pending_->metadata["caption/" + hash] = caption;
  return captions_.emplace(hash, std::move(stored)).first->second;
}

void DatasetWriter::add(const std::string& id, const Bucket& bucket, const std::string& caption, const Sample& own,
                        const Sample& caption_fields, const std::string& source_fingerprint) {
  ManifestSample sample{id, bucket, caption_hash(caption), source_fingerprint, {}};
  for (const auto& [field, tensor] : own) sample.fields[field] = store(fmt::format("{}/{}", field, id), tensor);
  for (const auto& [field, where] : store_caption(caption, caption_fields)) sample.fields[field] = where;
  manifest_.samples.push_back(std::move(sample));
  if (pending_->bytes >= shard_bytes_) flush_shard();
}

void DatasetWriter::set_empty_caption(const Sample& caption_fields) {
  manifest_.empty_caption = store_caption("", caption_fields);
}

void DatasetWriter::flush_shard() {
  if (pending_->tensors.empty()) return;
  const fs::path path = folder_ / pending_->file;
  write_safetensors(path, pending_->tensors, pending_->metadata);
  const FileChecksum sum = file_checksum(path);
  manifest_.shards.push_back({pending_->file, sum.bytes, sum.crc32});
  pending_ = std::make_unique<Pending>();
}

DatasetManifest DatasetWriter::finish() {
  flush_shard();
  manifest_.write(folder_);
  return manifest_;
}

}  // namespace wanfw
