#pragma once
// safetensors files: memory-mapped, fully validated reads and atomic writes; sharded
// checkpoints through `*.safetensors.index.json`.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// Where one tensor sits in a safetensors file.
struct TensorRecord {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::string dtype_name;  ///< as written in the header ("F32", "BF16", ...)
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  ///< offsets into the data area
  std::uint64_t end = 0;
};

/// A validated, memory-mapped safetensors file. Tensors returned by `tensor()` share the
/// mapping (which stays alive as long as any of them does) unless copied with `load()`.
class SafetensorsFile {
 public:
  /// Maps and validates `path`; throws FileError naming the file (and the tensor, where one is
  /// at fault) for anything malformed: header length, JSON, duplicate keys, unknown dtypes,
  /// shapes, offsets, holes or overlaps in the data area.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const;
  const std::vector<TensorRecord>& records() const;
  const std::map<std::string, std::string>& metadata() const;
  bool contains(const std::string& name) const;
  const TensorRecord& record(const std::string& name) const;
  /// A CPU tensor viewing the mapped bytes (read-only by contract; do not write into it).
  at::Tensor tensor(const std::string& name) const;
  /// An owning CPU copy.
  at::Tensor load(const std::string& name) const;

  struct Mapping;

 private:
  std::shared_ptr<const Mapping> mapping_;
};

/// Writes `tensors` (in the order given) with optional `__metadata__`; the file appears
/// atomically (temporary name, fsync, rename). Throws FileError on I/O failure.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// The safetensors dtype name of a LibTorch dtype ("F32"); throws for unsupported dtypes.
std::string safetensors_dtype_name(at::ScalarType dtype);

/// A checkpoint that is either one file or several shards listed by an index json
/// (`weight_map`: tensor name -> shard file, relative to the index).
class SafetensorsCheckpoint {
 public:
  /// `path`: a .safetensors file, a .safetensors.index.json, or a folder holding exactly one
  /// of either. Shards are opened on first use.
  static SafetensorsCheckpoint open(const std::filesystem::path& path);

  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  const TensorRecord& record(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;
  /// The file that holds `name`.
  std::filesystem::path file_of(const std::string& name) const;

 private:
  std::map<std::string, std::filesystem::path> weight_map_;
  std::shared_ptr<std::map<std::filesystem::path, SafetensorsFile>> files_;
  const SafetensorsFile& file(const std::filesystem::path& path) const;
};

}  // namespace wanfw
