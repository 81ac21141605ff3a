// Ulysses' two exchanges as autograd functions: each one all-to-all of dim-0 chunks (the
// destination rank made the leading dimension by a permute), and each the other's gradient.

#include "wanfw/sequence_parallel.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "wanfw/distributed.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

namespace {

at::Tensor exchange(const at::Tensor& chunks, const DistributedSession& session) {
  const at::Tensor input = chunks.contiguous();
  at::Tensor output = at::empty_like(input);
  session.all_to_all(output, input);
  return output;
}

/// [B, Ls, H, D] -> [B, p·Ls, H/p, D].
at::Tensor to_heads(const at::Tensor& x, const DistributedSession& session) {
  const std::int64_t p = session.world_size();
  if (x.dim() != 4) throw Error(fmt::format("sequence_to_heads takes [B, L/p, H, D], got {}", c10::str(x.sizes())));
  const std::int64_t b = x.size(0), ls = x.size(1), h = x.size(2), d = x.size(3);
  if (h % p != 0)
    throw Error(fmt::format("{} attention heads do not split over a sequence-parallel group of {}", h, p),
                "choose a sequence_parallel size that divides the model's head count");
  // [p(destination), B, Ls, H/p, D] out; [p(source), B, Ls, H/p, D] in: the source's tokens.
  const at::Tensor received = exchange(x.view({b, ls, p, h / p, d}).permute({2, 0, 1, 3, 4}), session);
  return received.permute({1, 0, 2, 3, 4}).reshape({b, p * ls, h / p, d});
}

/// [B, L, Hl, D] -> [B, L/p, p·Hl, D].
at::Tensor to_sequence(const at::Tensor& x, const DistributedSession& session) {
  const std::int64_t p = session.world_size();
  if (x.dim() != 4) throw Error(fmt::format("heads_to_sequence takes [B, L, H/p, D], got {}", c10::str(x.sizes())));
  const std::int64_t b = x.size(0), l = x.size(1), hl = x.size(2), d = x.size(3);
  if (l % p != 0)
    throw Error(fmt::format("a sequence of {} tokens does not split over a sequence-parallel group of {}", l, p),
                "pad the sequence to a multiple of the group size");
  // [p(destination: whose tokens), B, L/p, Hl, D] out; [p(source: whose heads), ...] in.
  const at::Tensor received = exchange(x.view({b, p, l / p, hl, d}).permute({1, 0, 2, 3, 4}), session);
  return received.permute({1, 2, 0, 3, 4}).reshape({b, l / p, p * hl, d});
}

/// One exchange as an autograd function: to heads when `ToHeads`, to the sequence otherwise; the
/// gradient goes the other way.
template <bool ToHeads>
struct Exchange : torch::autograd::Function<Exchange<ToHeads>> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const DistributedSession* session) {
    ctx->saved_data["session"] = reinterpret_cast<std::int64_t>(session);
    return ToHeads ? to_heads(x, *session) : to_sequence(x, *session);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto& session = *reinterpret_cast<const DistributedSession*>(ctx->saved_data["session"].toInt());
    return {ToHeads ? to_sequence(grads[0], session) : to_heads(grads[0], session), at::Tensor()};
  }
};

}  // namespace

at::Tensor sequence_to_heads(const at::Tensor& x, const DistributedSession& session) {
  return Exchange<true>::apply(x, &session);
}

at::Tensor heads_to_sequence(const at::Tensor& x, const DistributedSession& session) {
  return Exchange<false>::apply(x, &session);
}

}  // namespace wanfw
