#pragma once
// Internal: a batch built row by row from samples whose shapes were checked, each sample's bytes
// copied once into its row and checked for NaN and Inf in the same pass.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wanfw/data.hpp"

namespace wanfw {

class BatchBuffers;

class BatchAssembly {
 public:
  /// Batch tensors for up to samples.size() rows: each field shaped like the first sample's,
  /// fields in `padded` (dim::tokens first) as long as the longest; of the dtype in `dtypes`,
  /// else the first sample's. Memory from `buffers` when given (recycled; pinned with `pin`).
  BatchAssembly(const std::vector<Sample>& samples, const std::vector<std::string>& padded,
                const std::map<std::string, at::ScalarType>& dtypes, BatchBuffers* buffers, bool pin);

  /// A field of a sample that held NaN or infinite values.
  struct NonFinite {
    std::string field;
    std::int64_t count = 0, numel = 0;
  };
  /// Copies `sample` into the next row, padding zeroed, and checks it on the way: what held NaN
  /// or Inf is returned, and with `refuse_nonfinite` the row is then not taken (the next add()
  /// overwrites it).
  std::optional<NonFinite> add(const Sample& sample, bool refuse_nonfinite = true);
  /// Rows taken so far.
  std::int64_t rows() const { return rows_; }
  /// The batch of the rows taken (ids, epoch and seed are the caller's to set).
  Batch finish();

 private:
  std::map<std::string, at::Tensor> fields_;
  std::vector<std::string> padded_;
  std::int64_t rows_ = 0;
};

}  // namespace wanfw
