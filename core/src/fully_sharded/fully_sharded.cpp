// A unit's gather as an autograd function: all-gather forward, reduce-scatter backward.

#include "wanfw/fully_sharded.hpp"

#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "wanfw/distributed.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

namespace {

struct GatherFlat : torch::autograd::Function<GatherFlat> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& shard,
                            const DistributedSession* session, at::ScalarType compute, at::ScalarType reduce) {
    ctx->saved_data["session"] = reinterpret_cast<std::int64_t>(session);
    ctx->saved_data["reduce"] = static_cast<std::int64_t>(reduce);
    ctx->saved_data["shard_dtype"] = static_cast<std::int64_t>(shard.scalar_type());
    const at::Tensor input = shard.to(compute).contiguous();
    at::Tensor gathered = at::empty({session->world_size() * input.numel()}, input.options());
    session->all_gather(gathered, input);
    return gathered;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto& session = *reinterpret_cast<const DistributedSession*>(ctx->saved_data["session"].toInt());
    const auto reduce = static_cast<at::ScalarType>(ctx->saved_data["reduce"].toInt());
    const auto shard_dtype = static_cast<at::ScalarType>(ctx->saved_data["shard_dtype"].toInt());
    const at::Tensor full = grads[0].to(reduce).contiguous();
    at::Tensor piece = at::empty({full.numel() / session.world_size()}, full.options());
    session.reduce_scatter(piece, full, Reduce::Mean);
    return {piece.to(shard_dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::vector<at::Tensor> gather_unit(const at::Tensor& shard, const UnitLayout& layout,
                                    const DistributedSession& session, at::ScalarType compute, at::ScalarType reduce) {
  if (layout.world() != session.world_size())
    throw Error(
        fmt::format("a unit laid out for {} ranks cannot be gathered by {}", layout.world(), session.world_size()));
  if (shard.dim() != 1 || shard.numel() != layout.shard_numel())
    throw Error(fmt::format("a unit's shard holds {} values in {}; its layout says {} in one dimension", shard.numel(),
                            c10::str(shard.sizes()), layout.shard_numel()));
  return layout.unpack(GatherFlat::apply(shard, &session, compute, reduce));
}

double sharded_gradient_norm(const std::vector<at::Tensor>& gradients, const DistributedSession& session) {
  std::vector<at::Tensor> norms;  // one per tensor, in its dtype, on its device: one transfer for all
  for (const at::Tensor& gradient : gradients)
    if (gradient.defined()) norms.push_back(at::linalg_vector_norm(gradient.detach(), 2).to(at::kDouble));
  const double squares = norms.empty() ? 0.0 : at::stack(norms).pow(2).sum().item<double>();
  return std::sqrt(session.all_reduce(std::vector<double>{squares}, Reduce::Sum).at(0));
}

}  // namespace wanfw
