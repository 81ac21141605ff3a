// The fsdp strategy's checkpoints: each rank writes the rows it holds of every parameter, of its
// AdamW moments (wanfw/parallel/state_pieces.hpp) and of its average (wanfw/parameter_averages.hpp), and
// reads back the rows its layout needs, whatever world size (or strategy) wrote them.

#include <algorithm>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include "fsdp_strategy.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parameter_averages.hpp"

namespace wanfw_fsdp {

namespace {

wanfw::TensorRows whole(const std::string& name, const at::Tensor& tensor) {
  const std::vector<std::int64_t> shape = tensor.sizes().vec();
  return {name, shape, 0, shape.empty() ? 1 : shape[0], tensor.detach()};
}

}  // namespace

wanfw::StatePieces FsdpStrategy::state_pieces(wanfw::Model& model, torch::optim::AdamW& optimizer) {
  const int r = shards().rank();  // the rows this rank holds of its network's (or the model's) shards
  wanfw::StatePieces pieces;
  if (replicas_.across && replicas_.across->rank() != 0) return pieces;  // the first replica group writes
  auto rows_of = [&](const Place& place, const at::Tensor& flat_tensor, const std::string& name) {
    const wanfw::RowShard& s = place.flat->layout().shard(place.index);
    if (s.end(r) > s.begin(r))
      return std::optional<wanfw::TensorRows>(wanfw::TensorRows{
          name, s.shape, s.begin(r), s.end(r), place.flat->layout().rows(flat_tensor.detach(), place.index, r)});
    return std::optional<wanfw::TensorRows>();
  };
  for (const auto& [name, tensor] : model.checkpoint_tensors()) {
    auto it = place_of_.find(tensor.unsafeGetTensorImpl());
    if (it == place_of_.end()) {  // a buffer, the same on every rank: rank 0 writes it
      if (r == 0) pieces.model.push_back(whole(name, tensor));
      continue;
    }
    if (auto rows = rows_of(it->second, it->second.flat->shard(), name)) pieces.model.push_back(std::move(*rows));
  }
  for (const auto& [name, tensor] : model.trainable_parameters()) {
    const Place& place = place_of_.at(tensor.unsafeGetTensorImpl());
    for (const auto& [piece, state] : wanfw::optimizer_state_tensors(name, place.flat->shard(), optimizer))
      if (state.dim() == 0) {  // a step count: rank 0 writes it
        if (r == 0) pieces.optimizer.push_back(whole(piece, state));
      } else if (auto rows = rows_of(place, state, piece)) {
        pieces.optimizer.push_back(std::move(*rows));
      }
  }
  return pieces;
}

void FsdpStrategy::load_optimizer_state(wanfw::Model& model, torch::optim::AdamW& optimizer,
                                        const wanfw::TensorRowSource& source) {
  const int r = shards().rank();
  std::map<const void*, std::string> checkpoint_name;
  for (const auto& [name, tensor] : model.trainable_parameters()) checkpoint_name[tensor.unsafeGetTensorImpl()] = name;
  torch::NoGradGuard no_grad;
  wanfw::ParameterAverages* averages = wanfw::parameter_averages(optimizer);
  for (FlatShard* flat : flats()) {
    if (!flat->trainable()) continue;
    const wanfw::UnitLayout& layout = flat->layout();
    if (at::Tensor average = averages != nullptr ? averages->average(flat->shard()) : at::Tensor(); average.defined()) {
      average = average.clone();  // the rows the checkpoint holds replace the weights' copy
      for (std::size_t i = 0; i < layout.size(); ++i) {
        const std::string& name = checkpoint_name.at(flat->parameters()[i].unsafeGetTensorImpl());
        const wanfw::RowShard& s = layout.shard(i);
        if (!source.contains(name + ".ema")) continue;
        wanfw::require_shape(source, name + ".ema", s.shape);
        if (s.end(r) > s.begin(r))
          layout.rows(average, i, r)
              .copy_(source.rows(name + ".ema", s.begin(r), s.end(r), wanfw::TensorRole::weight())
                         .view(layout.rows(average, i, r).sizes()));
      }
      averages->restore(flat->shard(), average);
    }
    at::Tensor exp_avg = at::zeros_like(flat->shard()), exp_avg_sq = at::zeros_like(flat->shard());
    std::int64_t step = -1;
    for (std::size_t i = 0; i < layout.size(); ++i) {
      const std::string& name = checkpoint_name.at(flat->parameters()[i].unsafeGetTensorImpl());
      if (!source.contains(name + ".step")) continue;
      step = std::max(step, wanfw::read_step_count(source, name + ".step"));
      const wanfw::RowShard& s = layout.shard(i);
      for (const auto& [moment, role, target] :
           {std::tuple{".exp_avg", wanfw::TensorRole::first_moment(), exp_avg},
            std::tuple{".exp_avg_sq", wanfw::TensorRole::second_moment(), exp_avg_sq}}) {
        if (!source.contains(name + moment))
          throw wanfw::FileError(
              fmt::format("{}: optimizer state '{}{}' is missing", source.path().string(), name, moment),
              "the checkpoint is damaged; resume from an earlier one");
        wanfw::require_shape(source, name + moment, s.shape);
        if (s.end(r) > s.begin(r))
          layout.rows(target, i, r)
              .copy_(source.rows(name + moment, s.begin(r), s.end(r), role).view(layout.rows(target, i, r).sizes()));
      }
    }
    if (step < 0) continue;
    auto restored = std::make_unique<torch::optim::AdamWParamState>();
    restored->step(step);
    restored->exp_avg(exp_avg);
    restored->exp_avg_sq(exp_avg_sq);
    optimizer.state()[flat->shard().unsafeGetTensorImpl()] = std::move(restored);
  }
}

}  // namespace wanfw_fsdp
