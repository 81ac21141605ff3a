#pragma once
// Checkpoints of a training state kept in pieces across ranks (a strategy that shards it, fsdp):
// each rank writes the rows it holds of every tensor, the checkpoint's index says where each
// tensor's rows lie, and a resume on any number of ranks reads the rows it needs — from pieces
// written by another world size, or from a checkpoint written whole (single, ddp).
//
// Tensors are split along dim 0 (a scalar is one row), the layout of wanfw/parallel/shard_layout.hpp.

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "wanfw/io/tensor_check.hpp"

namespace torch::optim {
class AdamW;
}

namespace wanfw {

/// Rows [begin, end) of the checkpoint tensor `name` of `shape`, as this rank holds them.
struct TensorRows {
  std::string name;
  std::vector<std::int64_t> shape;  ///< the whole tensor's
  std::int64_t begin = 0, end = 0;
  at::Tensor rows;  ///< [end - begin, shape[1:]...]; a scalar: shape [] (begin 0, end 1)
};

/// What one rank writes of a checkpoint. Every rank's pieces of a tensor together cover its rows
/// once; a piece of no rows is left out.
struct StatePieces {
  std::vector<TensorRows> model;  ///< the model's checkpoint tensors (Model::checkpoint_tensors)
  /// AdamW's state under the names of the whole checkpoint: "<parameter>.exp_avg",
  /// "<parameter>.exp_avg_sq" (rows), "<parameter>.step" (a scalar: written by the rank holding row 0).
  std::vector<TensorRows> optimizer;
};

/// The optimizer's checkpoint tensors of one trainable parameter `name`, as the optimizer keeps
/// them for `held` (the parameter, or a strategy's shard of it): "<name>.ema" (its weight average,
/// when averages are kept), "<name>.step" (a scalar), "<name>.exp_avg", "<name>.exp_avg_sq" and, with
/// AMSGrad, "<name>.max_exp_avg_sq"; only the average before the optimizer's first step. The one
/// list of these names: the checkpoint store writes them whole, Strategy::state_pieces as whole
/// pieces, a sharding strategy as the rows it holds.
std::vector<std::pair<std::string, at::Tensor>> optimizer_state_tensors(const std::string& name, const at::Tensor& held,
                                                                        torch::optim::AdamW& optimizer);

/// One file of a checkpoint (the model's tensors, or the optimizer's) as rows, however it was
/// written: whole, or in pieces by any number of ranks.
class TensorRowSource {
 public:
  virtual ~TensorRowSource() = default;
  virtual bool contains(const std::string& name) const = 0;
  /// The whole tensor's shape. Throws FileError when the checkpoint has no such tensor.
  virtual std::vector<std::int64_t> shape(const std::string& name) const = 0;
  /// Rows [begin, end) of `name` (a scalar: 0, 1), as a new CPU tensor in the stored dtype,
  /// checked against `role` (tensor_check.hpp). Throws FileError naming the file and tensor.
  virtual at::Tensor rows(const std::string& name, std::int64_t begin, std::int64_t end,
                          const TensorRole& role) const = 0;
  /// What a message about its content names: the file's path, or its pieces' index's. Every
  /// refusal of a tensor read from here starts with it, so that a user knows which file to look at.
  virtual std::filesystem::path path() const = 0;
};

/// The shape of `name` in `source`, refused with a FileError that names the file, the tensor and
/// both shapes unless it is `expected` (the shape of the model's parameter it belongs to).
void require_shape(const TensorRowSource& source, const std::string& name, const std::vector<std::int64_t>& expected);

/// The optimizer step count `name` ("<parameter>.step") of `source`: one non-negative integer, else
/// a FileError naming the file and the tensor.
std::int64_t read_step_count(const TensorRowSource& source, const std::string& name);

}  // namespace wanfw
