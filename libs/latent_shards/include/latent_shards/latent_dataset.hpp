#pragma once
// Data set folders: latents and text embeddings encoded once, in safetensors shards listed by a
// manifest (docs/data.md has the format).
//
//   my_set/manifest.json                  every sample: id, bucket, caption hash, fingerprints,
//                                         and where each of its tensors lies (shard, name, shape)
//   my_set/shards/shard-00000.safetensors many samples each; text embeddings stored once per
//                                         distinct caption; captions in the metadata
//
// Training reads the manifest, never a directory glob. Shards and the manifest are written
// atomically; each shard's size and CRC-32 are in the manifest.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "latent_shards/dataset_format.hpp"
#include "wanfw/data.hpp"

namespace wanfw {

/// Where one tensor of a sample lies.
struct ManifestTensor {
  std::string shard;                ///< a file of `shards`, relative to the folder
  std::string tensor;               ///< its name in the shard
  std::vector<std::int64_t> shape;  ///< as stored
};

struct ManifestSample {
  std::string id;
  Bucket bucket;
  std::string caption_hash;        ///< identifies the caption (and its one text embedding)
  std::string source_fingerprint;  ///< of the source file the sample was encoded from
  std::map<std::string, ManifestTensor> fields;  ///< field name -> tensor
  std::int64_t reference_frames = 0;  ///< VACE: latent frames of reference images at the front (encode_dataset.py --control)
};

struct ManifestShard {
  std::string file;  ///< relative to the folder
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

struct DatasetManifest {
  static constexpr int kVersion = dataset_format::kVersion;
  static constexpr const char* kFileName = dataset_format::kManifestFile;

  int version = kVersion;
  /// What encoded the data ("vae": "Wan-AI/Wan2.2-TI2V-5B-Diffusers", "text_encoder": ...).
  std::map<std::string, std::string> encoders;
  /// A fingerprint of the encoding settings (encoders, resolutions, frame counts, dtype): a
  /// sample is reusable by a later encoding with the same settings and the same source.
  std::string encoding_fingerprint;
  /// The empty prompt's fields (caption dropout); may be empty.
  std::map<std::string, ManifestTensor> empty_caption;
  std::vector<ManifestShard> shards;
  std::vector<ManifestSample> samples;

  /// Reads and validates `folder`/manifest.json: types, sizes, unique ids, buckets, and every
  /// shard a relative file below the folder that the manifest lists. Throws FileError naming the
  /// file and the entry at fault.
  static DatasetManifest read(const std::filesystem::path& folder);
  /// Writes `folder`/manifest.json atomically.
  void write(const std::filesystem::path& folder) const;
};

/// Writes a data set folder: samples are packed into shards of about `shard_bytes`, each
/// written atomically with its CRC-32; finish() writes the manifest. A caption's fields are
/// stored once, with the first sample that uses it.
class DatasetWriter {
 public:
  DatasetWriter(std::filesystem::path folder, std::map<std::string, std::string> encoders,
                std::string encoding_fingerprint, std::int64_t shard_bytes = 256 << 20);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  /// One sample: its own tensors (latents, ...) and its caption's (text embedding, ...), keyed
  /// by field name. Tensors are stored as given (bfloat16 by convention).
  void add(const std::string& id, const Bucket& bucket, const std::string& caption, const Sample& own,
           const Sample& caption_fields, const std::string& source_fingerprint = "");
  /// The empty prompt's fields, for caption dropout.
  void set_empty_caption(const Sample& caption_fields);
  /// Writes the last shard and the manifest; returns it.
  DatasetManifest finish();

 private:
  void flush_shard();
  /// Adds `tensor` to the shard being filled, under `name`.
  ManifestTensor store(const std::string& name, const at::Tensor& tensor);
  /// The caption's fields, stored with the first sample that uses the caption.
  const std::map<std::string, ManifestTensor>& store_caption(const std::string& caption, const Sample& fields);
  struct Pending;
  std::filesystem::path folder_;
  DatasetManifest manifest_;
  std::int64_t shard_bytes_;
  std::unique_ptr<Pending> pending_;
  std::map<std::string, std::map<std::string, ManifestTensor>> captions_;  ///< caption hash -> fields
};

/// A stable hash of a caption's text, as written in manifests (16 hex digits).
std::string caption_hash(const std::string& caption);

/// The data set of a folder (the `latent_shards` plugin): samples by manifest order, buckets from
/// the manifest, tensors memory-mapped from their shards. Opening checks the manifest and that
/// every shard has the size the manifest says (a truncated or replaced shard is named at once);
/// with `checksums`, each shard's CRC-32 is checked when it is first opened (one read of the
/// shard, which the page cache then serves); verify_dataset checks everything.
class LatentShardDataset final : public Dataset {
 public:
  /// `fields`: the fields to read (empty: every field of each sample); `validation_folder`:
  /// the held-out set validation_set() opens (empty: none).
  LatentShardDataset(std::filesystem::path folder, std::vector<FieldSpec> fields,
                     std::filesystem::path validation_folder = {}, bool checksums = true);
  ~LatentShardDataset() override;

  std::int64_t size() const override;
  Sample get(std::int64_t index) const override;
  const std::vector<Bucket>& buckets() const override { return buckets_; }
  std::int64_t bucket_of(std::int64_t index) const override;
  std::string describe_sample(std::int64_t index) const override;
  Sample empty_caption() const override;
  std::shared_ptr<Dataset> validation_set(std::int64_t max_samples, std::uint64_t seed) const override;
  std::string summary() const override;
  const DatasetManifest& manifest() const { return manifest_; }
  const std::filesystem::path& folder() const { return folder_; }

 private:
  at::Tensor read(const ManifestTensor& where, const std::string& field,
                  const std::function<std::string()>& owner) const;
  struct Shards;
  std::filesystem::path folder_;
  std::filesystem::path validation_folder_;
  std::vector<FieldSpec> fields_;
  DatasetManifest manifest_;
  std::vector<Bucket> buckets_;
  std::vector<std::int64_t> bucket_of_;
  std::int64_t max_samples_ = 0;  ///< 0: all (validation sets cap it)
  bool checksums_ = true;
  std::unique_ptr<Shards> shards_;
};

/// What `wanfw data verify` found: one line per problem (file, sample, what), empty when the
/// folder is sound.
struct VerifyReport {
  std::int64_t shards = 0, samples = 0, bytes = 0;
  std::vector<std::string> problems;
};
/// Checks every shard (size, CRC-32, a valid safetensors file) and every sample (each tensor
/// present with the manifest's shape, finite values, its bucket). `progress` (optional) is told
/// each shard as it is checked.
VerifyReport verify_dataset(const std::filesystem::path& folder,
                            const std::function<void(std::int64_t done, std::int64_t total)>& progress = {});

}  // namespace wanfw
