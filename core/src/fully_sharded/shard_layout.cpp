#include "wanfw/parallel/shard_layout.hpp"

#include <algorithm>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"

namespace wanfw {

RowShard RowShard::of(std::vector<std::int64_t> shape, int world) {
  if (world < 1) throw Error(fmt::format("a tensor cannot be sharded over {} ranks", world));
  if (std::ranges::any_of(shape, [](std::int64_t size) { return size < 0; }))
    throw Error(fmt::format("a shape with a negative dimension cannot be sharded: [{}]", fmt::join(shape, ", ")));
  RowShard s;
  s.world = world;
  s.rows = shape.empty() ? 1 : shape[0];
  for (std::size_t d = 1; d < shape.size(); ++d) s.row_numel *= shape[d];
  s.rows_per_rank = (s.rows + world - 1) / world;
  s.shape = std::move(shape);
  return s;
}

std::int64_t RowShard::begin(int rank) const { return std::min<std::int64_t>(rank * rows_per_rank, rows); }

std::int64_t RowShard::end(int rank) const { return std::min<std::int64_t>((rank + 1) * rows_per_rank, rows); }

UnitLayout::UnitLayout(std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors, int world)
    : world_(world) {
  if (world < 1) throw Error(fmt::format("a unit cannot be sharded over {} ranks", world));
  for (auto& [name, shape] : tensors) {
    names_.push_back(std::move(name));
    shards_.push_back(RowShard::of(std::move(shape), world));
    offsets_.push_back(shard_numel_);
    shard_numel_ += shards_.back().piece_numel();
  }
}

at::Tensor UnitLayout::pack(const std::vector<at::Tensor>& tensors, int rank, at::ScalarType dtype) const {
  if (tensors.size() != shards_.size())
    throw Error(fmt::format("a unit of {} tensors was given {}", shards_.size(), tensors.size()));
  const c10::Device device = tensors.empty() ? c10::Device(c10::kCPU) : tensors.front().device();
  at::Tensor flat = at::zeros({shard_numel_}, at::TensorOptions().dtype(dtype).device(device));
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const RowShard& s = shards_[i];
    if (tensors[i].sizes() != at::IntArrayRef(s.shape))
      throw Error(fmt::format("tensor '{}' is {}, its layout says [{}]", names_[i], c10::str(tensors[i].sizes()),
                              fmt::join(s.shape, ", ")));
    const std::int64_t real = s.end(rank) - s.begin(rank);
    if (real <= 0) continue;
    const at::Tensor source = tensors[i].reshape({s.rows, s.row_numel}).narrow(0, s.begin(rank), real);
    flat.narrow(0, offsets_[i], real * s.row_numel).view({real, s.row_numel}).copy_(source);
  }
  return flat;
}

std::vector<at::Tensor> UnitLayout::unpack(const at::Tensor& gathered) const {
  if (gathered.numel() != world_ * shard_numel_)
    throw Error(fmt::format("a gathered unit holds {} values; {} ranks x {} were expected", gathered.numel(), world_,
                            shard_numel_));
  const at::Tensor by_rank = gathered.reshape({world_, shard_numel_});
  std::vector<at::Tensor> full;
  full.reserve(shards_.size());
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const RowShard& s = shards_[i];
    full.push_back(by_rank.narrow(1, offsets_[i], s.piece_numel())
                       .reshape({world_ * s.rows_per_rank, s.row_numel})
                       .narrow(0, 0, s.rows)
                       .reshape(s.shape));
  }
  return full;
}

at::Tensor UnitLayout::pack_all(const std::vector<at::Tensor>& tensors, at::ScalarType dtype) const {
  if (tensors.size() != shards_.size())
    throw Error(fmt::format("a unit of {} tensors was given {}", shards_.size(), tensors.size()));
  c10::Device device(c10::kCPU);
  for (const at::Tensor& t : tensors)
    if (t.defined()) device = t.device();
  at::Tensor by_rank = at::zeros({world_, shard_numel_}, at::TensorOptions().dtype(dtype).device(device));
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const RowShard& s = shards_[i];
    if (!tensors[i].defined() || s.rows * s.row_numel == 0) continue;
    if (tensors[i].sizes() != at::IntArrayRef(s.shape))
      throw Error(fmt::format("tensor '{}' is {}, its layout says [{}]", names_[i], c10::str(tensors[i].sizes()),
                              fmt::join(s.shape, ", ")));
    // Rows padded to world x c, so rank r's c rows are row block r.
    const at::Tensor padded =
        at::constant_pad_nd(tensors[i].reshape({s.rows, s.row_numel}), {0, 0, 0, world_ * s.rows_per_rank - s.rows});
    by_rank.narrow(1, offsets_[i], s.piece_numel()).copy_(padded.view({world_, s.piece_numel()}));
  }
  return by_rank.view(-1);
}

void UnitLayout::unpack_into(const at::Tensor& gathered, const std::vector<at::Tensor>& full) const {
  if (full.size() != shards_.size())
    throw Error(fmt::format("a unit of {} tensors was given {}", shards_.size(), full.size()));
  if (gathered.numel() != world_ * shard_numel_)
    throw Error(fmt::format("a gathered unit holds {} values; {} ranks x {} were expected", gathered.numel(), world_,
                            shard_numel_));
  const at::Tensor by_rank = gathered.view({world_, shard_numel_});
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const RowShard& s = shards_[i];
    const at::Tensor target = full[i].view({s.rows, s.row_numel});
    for (int r = 0; r < world_; ++r) {
      const std::int64_t real = s.end(r) - s.begin(r);
      if (real <= 0) break;
      target.narrow(0, s.begin(r), real).copy_(by_rank[r].narrow(0, offsets_[i], real * s.row_numel).view({real, s.row_numel}));
    }
  }
}

at::Tensor UnitLayout::rows(const at::Tensor& flat_shard, std::size_t i, int rank) const {
  const RowShard& s = shards_.at(i);
  const std::int64_t real = std::max<std::int64_t>(s.end(rank) - s.begin(rank), 0);
  const at::Tensor piece = flat_shard.narrow(0, offsets_[i], real * s.row_numel);
  if (s.shape.empty()) return real == 1 ? piece.view(at::IntArrayRef{}) : piece;  // {} alone picks view(dtype)
  std::vector<std::int64_t> shape = s.shape;
  shape[0] = real;
  return piece.view(shape);
}

}  // namespace wanfw
