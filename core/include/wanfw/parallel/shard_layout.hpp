#pragma once
// Where the pieces of sharded tensors lie: the arithmetic that fully sharded training, its
// checkpoints and their resharding onto another world size share.
//
// A tensor is split along dim 0. With `world` ranks every rank holds c = ceil(rows / world) rows
// (the last ranks may hold fewer real ones, or none): rank r's real rows are
// [r·c, min((r+1)·c, rows)) and the rest of its c rows are zero padding. So every rank's piece
// has the same size, and a flat all-gather of the pieces needs no per-call padding. A scalar is
// one row.
//
// A unit's tensors lie back to back in one flat shard per rank (UnitLayout): one all-gather
// gathers a whole unit, one reduce-scatter reduces its gradients.
//
//   wanfw::UnitLayout layout({{"w", {10, 4}}, {"b", {10}}}, /*world=*/4);
//   at::Tensor mine = layout.pack({w, b}, rank, at::kFloat);        // layout.shard_numel() values
//   session->all_gather(gathered, mine);                               // world x shard_numel
//   std::vector<at::Tensor> full = layout.unpack(gathered);            // w and b again

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// How one tensor of `shape` splits along dim 0 over `world` ranks.
struct RowShard {
  std::vector<std::int64_t> shape;
  std::int64_t rows = 1;           ///< shape[0] (1 for a scalar)
  std::int64_t row_numel = 1;      ///< elements in one row
  std::int64_t rows_per_rank = 1;  ///< c = ceil(rows / world)
  int world = 1;

  static RowShard of(std::vector<std::int64_t> shape, int world);
  /// Rank `rank`'s real rows: [begin, end), empty for a rank past the last row.
  std::int64_t begin(int rank) const;
  std::int64_t end(int rank) const;
  /// Elements of one rank's piece, padding included.
  std::int64_t piece_numel() const { return rows_per_rank * row_numel; }
};

/// Several tensors' pieces back to back in one flat shard per rank.
class UnitLayout {
 public:
  /// `tensors`: names and shapes, in the order the flat shard holds them. Throws wanfw::Error for
  /// world < 1 or a negative dimension.
  UnitLayout(std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors, int world);

  int world() const { return world_; }
  std::size_t size() const { return shards_.size(); }
  const std::string& name(std::size_t i) const { return names_.at(i); }
  const RowShard& shard(std::size_t i) const { return shards_.at(i); }
  /// Where tensor i's piece starts in the flat shard.
  std::int64_t offset(std::size_t i) const { return offsets_.at(i); }
  /// Elements of one rank's flat shard (the same on every rank).
  std::int64_t shard_numel() const { return shard_numel_; }

  /// Rank `rank`'s flat shard of the full `tensors` (one a layout entry, in order), in `dtype`,
  /// padding zero. Not differentiable (a new tensor).
  at::Tensor pack(const std::vector<at::Tensor>& tensors, int rank, at::ScalarType dtype) const;
  /// The full tensors from `gathered`, every rank's flat shard in rank order (world x
  /// shard_numel elements), padding dropped. Differentiable: the gradient of `gathered` holds, at
  /// rank r's part, each tensor's rows of rank r (zero at padding), which is what a reduce-scatter
  /// of it hands back to rank r.
  std::vector<at::Tensor> unpack(const at::Tensor& gathered) const;
  /// Every rank's flat shard of the full `tensors`, rank after rank (world x shard_numel values
  /// in `dtype`): what an all-gather of each rank's pack() gives, and what a reduce-scatter of
  /// full gradients takes. An undefined tensor counts as zeros. Not differentiable.
  at::Tensor pack_all(const std::vector<at::Tensor>& tensors, at::ScalarType dtype) const;
  /// unpack() into existing tensors: copies each tensor's rows from `gathered` into `full[i]`
  /// (layout shapes, any dtype). Not differentiable.
  void unpack_into(const at::Tensor& gathered, const std::vector<at::Tensor>& full) const;
  /// Tensor i's real rows in `flat_shard` (rank `rank`'s flat shard): a view of
  /// [end - begin, shape[1:]...] (a scalar: shape [] on the rank that holds it, [0] elsewhere).
  at::Tensor rows(const at::Tensor& flat_shard, std::size_t i, int rank) const;

 private:
  int world_;
  std::vector<std::string> names_;
  std::vector<RowShard> shards_;
  std::vector<std::int64_t> offsets_;
  std::int64_t shard_numel_ = 0;
};

}  // namespace wanfw
