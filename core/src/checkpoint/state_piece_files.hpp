#pragma once
// Internal: a checkpoint's tensor files as rows (wanfw/parallel/state_pieces.hpp), written whole by the
// main process or in pieces by every rank:
//
//   model.safetensors                    every tensor whole (single, ddp, ...)
//   model-00001-of-00004.safetensors     rank 1's rows of each tensor, under the tensor's name;
//                                        the file's metadata says which rows of which shape
//   model.pieces.json                    the index: {"world_size": 4, "tensors": {name: {"shape":
//                                        [...], "dtype": "F32", "pieces": [{"file": ..., "rows":
//                                        [begin, end]}, ...]}}}, the pieces in row order
//
// and the same for "optimizer". Readers take rows of any tensor from either form, so a run resumes
// on any world size, and from a checkpoint of any strategy.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "wanfw/parallel/state_pieces.hpp"

namespace wanfw {

/// "model-00001-of-00004.safetensors" for `kind` "model", rank 1 of 4.
std::string piece_file_name(const std::string& kind, int rank, int world);
/// "model.pieces.json"
std::string piece_index_name(const std::string& kind);
/// Writes this rank's `pieces` of `kind` into `folder` (every piece of no rows left out).
void write_piece_file(const std::filesystem::path& folder, const std::string& kind, int rank, int world,
                      const std::vector<TensorRows>& pieces);
/// After every rank wrote its file: the index of `kind`, from the files' headers. Throws FileError
/// when a tensor's pieces do not cover its rows exactly once.
void write_piece_index(const std::filesystem::path& folder, const std::string& kind, int world);

/// One file of a checkpoint as rows.
class CheckpointRows : public TensorRowSource {
 public:
  /// Every tensor's name.
  virtual std::vector<std::string> names() const = 0;
  /// Copies rows [begin, end) of `name`, checked against `role`, into `destination` (their shape;
  /// any device and dtype).
  virtual void copy_rows(const at::Tensor& destination, const std::string& name, std::int64_t begin,
                         std::int64_t end, const TensorRole& role) const;
};

/// `folder`'s `kind` ("model", "optimizer"): the whole file `<kind>.safetensors` when it exists,
/// else the pieces its index lists. Throws FileError when neither exists or the index is malformed.
std::unique_ptr<CheckpointRows> open_checkpoint_rows(const std::filesystem::path& folder, const std::string& kind);

}  // namespace wanfw
