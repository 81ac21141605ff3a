// Ulysses' two exchanges as autograd functions: each one all-to-all of dim-0 chunks (the
// destination rank made the leading dimension by a permute), and each the other's gradient.

#include "wanfw/parallel/sequence_parallel.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "wanfw/parallel/distributed.hpp"
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

namespace wanfw {

namespace {

/// All-gather along dim 1 as an autograd function: the backward reduce-scatters (sums) the
/// gradient, each rank keeping its own tokens'.
struct GatherTokens : torch::autograd::Function<GatherTokens> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const DistributedSession* group) {
    ctx->saved_data["group"] = reinterpret_cast<std::int64_t>(group);
    const std::int64_t p = group->world_size();
    const at::Tensor input = x.contiguous();
    at::Tensor gathered = at::empty({p * input.numel()}, input.options());
    group->all_gather(gathered, input);
    // [p, B, Ll, ...] -> [B, p·Ll, ...]
    std::vector<std::int64_t> shape{p};
    for (const auto size : input.sizes()) shape.push_back(size);
    at::Tensor by_rank = gathered.view(shape).transpose(0, 1);
    std::vector<std::int64_t> out = input.sizes().vec();
    out[1] *= p;
    return by_rank.reshape(out);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto& group = *reinterpret_cast<const DistributedSession*>(ctx->saved_data["group"].toInt());
    const std::int64_t p = group.world_size();
    const at::Tensor grad = grads[0];
    std::vector<std::int64_t> split = grad.sizes().vec();
    split[1] /= p;
    split.insert(split.begin() + 1, p);  // [B, p, Ll, ...]
    const at::Tensor by_rank = grad.reshape(split).transpose(0, 1).contiguous();  // [p, B, Ll, ...]
    std::vector<std::int64_t> piece = grad.sizes().vec();
    piece[1] /= p;
    at::Tensor mine = at::empty(piece, grad.options());
    group.reduce_scatter(mine, by_rank, Reduce::Sum);
    return {mine, at::Tensor()};
  }
};

}  // namespace

SequenceSplit::SequenceSplit(const DistributedSession& group, std::int64_t tokens)
    : group_(&group), tokens_(tokens), rank_(group.rank()), size_(group.world_size()) {
  if (tokens < 1) throw Error(fmt::format("a sequence of {} tokens cannot be split", tokens));
  padded_ = (tokens + size_ - 1) / size_ * size_;
}

at::Tensor SequenceSplit::split(const at::Tensor& x) const {
  if (x.dim() < 2 || x.size(1) != tokens_)
    throw Error(fmt::format("a sequence split holds {} tokens along dim 1, given {}", tokens_, c10::str(x.sizes())));
  at::Tensor padded = x;
  if (padded_ != tokens_) {
    std::vector<std::int64_t> pad(2 * static_cast<std::size_t>(x.dim()), 0);
    pad[pad.size() - 3] = padded_ - tokens_;  // dim 1's end: pairs run from the last dim backwards
    padded = at::constant_pad_nd(x, pad);
  }
  return padded.narrow(1, begin(), local());
}

at::Tensor SequenceSplit::gather(const at::Tensor& x) const {
  if (x.dim() < 2 || x.size(1) != local())
    throw Error(fmt::format("a sequence split gathers {} tokens a rank along dim 1, given {}", local(),
                            c10::str(x.sizes())));
  const at::Tensor whole = size_ == 1 ? x : GatherTokens::apply(x, group_);
  return padded_ == tokens_ ? whole : whole.narrow(1, 0, tokens_);
}

at::Tensor SequenceSplit::key_mask(const c10::Device& device) const {
  if (padded_ == tokens_) return {};
  return (at::arange(padded_, at::TensorOptions().device(device)) < tokens_);
}

}  // namespace wanfw
