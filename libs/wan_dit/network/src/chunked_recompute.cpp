#include "chunked_recompute.hpp"

#include <torch/torch.h>

#include "wan/block_ops.hpp"

namespace wan {

namespace {

/// Tokens `start` .. `start` + `count` of a sequence.
struct Chunk {
  std::int64_t start = 0, count = 0;
};

/// `tokens` in `chunks` runs of nearly equal size (never more chunks than tokens).
std::vector<Chunk> chunks_of(std::int64_t tokens, std::int64_t chunks) {
  const std::int64_t n = std::max<std::int64_t>(1, std::min(chunks, tokens));
  std::vector<Chunk> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back({i * tokens / n, (i + 1) * tokens / n - i * tokens / n});
  return out;
}

/// What one block's chunks read: the inputs' rows of a chunk, and the dropout masks' rows.
class ChunkView {
 public:
  ChunkView(const torch::Tensor& x, const torch::Tensor& e0, const RopeTables& rope, LoraDropoutStreams* dropout)
      : x_(x), e0_(e0), rope_(rope), dropout_(dropout) {}
  ~ChunkView() { rows({}); }
  ChunkView(const ChunkView&) = delete;
  ChunkView& operator=(const ChunkView&) = delete;

  torch::Tensor x(const Chunk& c) const { return x_.narrow(1, c.start, c.count); }
  std::int64_t tokens() const { return x_.size(1); }
  /// Per-token timesteps (ti2v, [B, L, 6, dim]) give the chunk's rows; one a sample, all of it.
  torch::Tensor e0(const Chunk& c) const { return e0_.dim() == 4 ? e0_.narrow(1, c.start, c.count) : e0_; }
  /// The chunk's RoPE rotations; undefined for a split sequence (rotated after the exchange).
  torch::Tensor rotations(const Chunk& c) const {
    return rope_.sequence != nullptr ? torch::Tensor() : rope_.rotations.narrow(0, c.start, c.count);
  }
  /// Adapter dropout draws the chunk's rows of the whole sequence's masks; an empty chunk: every row.
  void rows(const Chunk& c) {
    if (dropout_ != nullptr)
      dropout_->set_rows(c.count > 0 ? std::optional<LoraDropoutStreams::Rows>({c.start, x_.size(1)}) : std::nullopt);
  }

 private:
  torch::Tensor x_, e0_;
  const RopeTables& rope_;
  LoraDropoutStreams* dropout_;
};

torch::Tensor leaf(const torch::Tensor& t, bool requires_grad) { return t.detach().requires_grad_(requires_grad); }

}  // namespace

std::vector<torch::Tensor> gradients_of(const std::vector<torch::Tensor>& outputs,
                                        const std::vector<torch::Tensor>& grads, const std::vector<torch::Tensor>& wrt) {
  std::vector<torch::Tensor> out_list, grad_list, wrt_list;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].requires_grad() && grads[i].defined()) out_list.push_back(outputs[i]), grad_list.push_back(grads[i]);
  std::vector<std::size_t> slot;
  for (std::size_t i = 0; i < wrt.size(); ++i)
    if (wrt[i].defined() && wrt[i].requires_grad()) wrt_list.push_back(wrt[i]), slot.push_back(i);
  std::vector<torch::Tensor> result(wrt.size());
  if (out_list.empty() || wrt_list.empty()) return result;
  const auto g = torch::autograd::grad(out_list, wrt_list, grad_list, /*retain_graph=*/false, /*create_graph=*/false,
                                       /*allow_unused=*/true);
  for (std::size_t i = 0; i < g.size(); ++i) result[slot[i]] = g[i];
  return result;
}

namespace {

/// Sums of gradients that arrive a chunk at a time.
struct GradientSums {
  std::vector<torch::Tensor> sums;
  explicit GradientSums(std::size_t n) : sums(n) {}
  void add(std::size_t i, const torch::Tensor& g) {
    if (g.defined()) sums[i] = sums[i].defined() ? sums[i] + g : g;
  }
};

/// Writes a chunk's rows `part` into `whole`, a tensor of `tokens` rows made at the first chunk
/// (`add`: adds them to what is there).
void put_rows(torch::Tensor& whole, std::int64_t tokens, const Chunk& c, const torch::Tensor& part, bool add) {
  if (!part.defined()) return;
  if (!whole.defined()) {
    auto sizes = part.sizes().vec();
    sizes[1] = tokens;
    whole = at::zeros(sizes, part.options());
  }
  if (add) whole.narrow(1, c.start, c.count).add_(part);
  else whole.narrow(1, c.start, c.count).copy_(part);
}

/// The self-attention's queries, keys and values of every token, computed a chunk at a time
/// (under the caller's grad mode).
std::array<torch::Tensor, 3> attention_inputs_of_every_token(WanBlockImpl& block, ChunkView& view,
                                                             const std::vector<Chunk>& parts) {
  std::array<torch::Tensor, 3> qkv;
  for (const Chunk& c : parts) {
    view.rows(c);
    const auto part = block.attention_inputs(view.x(c), modulation_chunks(block.modulation, view.e0(c), 6),
                                             view.rotations(c));
    for (std::size_t j = 0; j < 3; ++j) put_rows(qkv[j], view.tokens(), c, part[j], false);
  }
  view.rows({});
  return qkv;
}

}  // namespace

torch::Tensor chunked_block_forward(WanBlockImpl& block, const torch::Tensor& x, const torch::Tensor& e0,
                                    const torch::Tensor& context, const RopeTables& rope, std::int64_t chunks,
                                    LoraDropoutStreams* dropout) {
  ChunkView view(x, e0, rope, dropout);
  const auto parts = chunks_of(x.size(1), chunks);
  std::array<torch::Tensor, 3> qkv = attention_inputs_of_every_token(block, view, parts);
  torch::Tensor mixed = block.self_mix(qkv[0], qkv[1], qkv[2], rope, x.scalar_type());
  qkv = {};
  const auto [context_key, context_value] = block.cross_attn->keys_values(context, {});
  torch::Tensor out;
  for (const Chunk& c : parts) {
    view.rows(c);
    const torch::Tensor part = block.after_attention(view.x(c), mixed.narrow(1, c.start, c.count),
                                                     modulation_chunks(block.modulation, view.e0(c), 6), context_key,
                                                     context_value);
    put_rows(out, view.tokens(), c, part, false);
  }
  return out;
}

std::vector<torch::Tensor> chunked_block_backward(WanBlockImpl& block, const std::vector<torch::Tensor>& inputs,
                                                  const std::vector<torch::Tensor>& parameters, const RopeTables& rope,
                                                  std::int64_t chunks, LoraDropoutStreams* dropout,
                                                  const torch::Tensor& grad_output) {
  const torch::Tensor &x = inputs[0], &e0 = inputs[1], &context = inputs[2];
  const bool per_token = e0.dim() == 4;
  ChunkView view(x, e0, rope, dropout);
  const auto parts = chunks_of(x.size(1), chunks);
  const std::size_t P = parameters.size();
  // Gradients: x and a per-token e0 over every token; a per-sample e0, the context's keys and
  // values, and each parameter summed over the chunks.
  torch::Tensor grad_x, grad_e0;
  enum : std::size_t { kE0 = 0, kKey = 1, kValue = 2, kParameters = 3 };
  GradientSums sums(kParameters + P);
  const auto with_parameters = [&](std::vector<torch::Tensor> wrt) {
    wrt.insert(wrt.end(), parameters.begin(), parameters.end());
    return wrt;
  };
  const auto add_parameters = [&](const std::vector<torch::Tensor>& g, std::size_t first) {
    for (std::size_t i = 0; i < P; ++i) sums.add(kParameters + i, g[first + i]);
  };
  const auto add_e0 = [&](const Chunk& c, const torch::Tensor& g, bool add) {
    if (per_token) put_rows(grad_e0, e0.size(1), c, g, add);
    else sums.add(kE0, g);
  };

  // 1. The self-attention's queries, keys and values of every token, a chunk at a time, no graph.
  std::array<torch::Tensor, 3> qkv;
  {
    torch::NoGradGuard no_grad;
    qkv = attention_inputs_of_every_token(block, view, parts);
  }
  // 2. The self-attention over every token, with its graph from the queries, keys and values.
  for (auto& t : qkv) t.requires_grad_(true);
  torch::Tensor mixed = block.self_mix(qkv[0], qkv[1], qkv[2], rope, x.scalar_type());
  // The cross-attention's keys and values (the context's few tokens), once, with their graph.
  const auto [context_key, context_value] = block.cross_attn->keys_values(context, {});
  const torch::Tensor key_leaf = leaf(context_key, context_key.requires_grad());
  const torch::Tensor value_leaf = leaf(context_value, context_value.requires_grad());

  // 3. The rest of the block and its backward, a chunk at a time: the gradients of the mix.
  torch::Tensor grad_mixed;
  {
    const torch::Tensor mixed_values = mixed.detach();
    for (const Chunk& c : parts) {
      view.rows(c);
      const torch::Tensor xc = leaf(view.x(c), x.requires_grad()), ec = leaf(view.e0(c), e0.requires_grad());
      const torch::Tensor mc = leaf(mixed_values.narrow(1, c.start, c.count), true);
      const torch::Tensor out =
          block.after_attention(xc, mc, modulation_chunks(block.modulation, ec, 6), key_leaf, value_leaf);
      const auto g = gradients_of({out}, {grad_output.narrow(1, c.start, c.count)},
                               with_parameters({xc, mc, ec, key_leaf, value_leaf}));
      put_rows(grad_x, x.size(1), c, g[0], false);
      put_rows(grad_mixed, x.size(1), c, g[1], false);
      add_e0(c, g[2], false);
      sums.add(kKey, g[3]);
      sums.add(kValue, g[4]);
      add_parameters(g, 5);
    }
    view.rows({});
  }
  // 4. The self-attention's backward over every token.
  auto grad_qkv = gradients_of({mixed}, {grad_mixed}, {qkv[0], qkv[1], qkv[2]});
  mixed = torch::Tensor();
  grad_mixed = torch::Tensor();
  qkv = {};
  // 5. The queries', keys' and values' backward, a chunk at a time.
  for (const Chunk& c : parts) {
    view.rows(c);
    const torch::Tensor xc = leaf(view.x(c), x.requires_grad()), ec = leaf(view.e0(c), e0.requires_grad());
    const auto part = block.attention_inputs(xc, modulation_chunks(block.modulation, ec, 6), view.rotations(c));
    std::vector<torch::Tensor> grads;
    for (std::size_t j = 0; j < 3; ++j)
      grads.push_back(grad_qkv[j].defined() ? grad_qkv[j].narrow(1, c.start, c.count) : torch::Tensor());
    const auto g = gradients_of({part[0], part[1], part[2]}, grads, with_parameters({xc, ec}));
    put_rows(grad_x, x.size(1), c, g[0], true);
    add_e0(c, g[1], true);
    add_parameters(g, 2);
  }
  view.rows({});
  grad_qkv = {};
  // 6. The cross-attention's keys' and values' backward.
  const auto g = gradients_of({context_key, context_value}, {sums.sums[kKey], sums.sums[kValue]}, with_parameters({context}));
  add_parameters(g, 1);

  std::vector<torch::Tensor> result{x.requires_grad() ? grad_x : torch::Tensor(),
                                    e0.requires_grad() ? (per_token ? grad_e0 : sums.sums[kE0]) : torch::Tensor(),
                                    g[0]};
  for (std::size_t i = 0; i < P; ++i) result.push_back(sums.sums[kParameters + i]);
  return result;
}

std::vector<torch::Tensor> chunked_vace_backward(WanBlockImpl& block, const std::vector<torch::Tensor>& inputs,
                                                 const std::vector<torch::Tensor>& parameters, const RopeTables& rope,
                                                 std::int64_t chunks, LoraDropoutStreams* dropout,
                                                 const std::vector<torch::Tensor>& grad_outputs) {
  const torch::Tensor &x = inputs[0], &e0 = inputs[1], &context = inputs[2], &embedded = inputs[3];
  // The block's input, with its graph from the state and the embedded latents (block 0's before_proj).
  const torch::Tensor in = block.before_proj ? block.before_proj(x) + embedded : x;
  const torch::Tensor in_leaf = leaf(in, in.requires_grad());
  // The block's output again, without a graph, and the hint's backward: what reaches the output.
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    out = chunked_block_forward(block, in_leaf, e0, context, rope, chunks, dropout);
  }
  const torch::Tensor out_leaf = leaf(out, true);
  std::vector<torch::Tensor> wrt = {out_leaf};
  wrt.insert(wrt.end(), parameters.begin(), parameters.end());
  const auto hint = gradients_of({block.after_proj(out_leaf)}, {grad_outputs.at(1)}, wrt);
  const torch::Tensor& state = grad_outputs.at(0);
  const torch::Tensor grad_out = !state.defined() ? hint[0] : hint[0].defined() ? state + hint[0] : state;
  // The block's backward a chunk at a time, then the input's through before_proj.
  const auto inner = chunked_block_backward(block, {in_leaf, e0, context}, parameters, rope, chunks, dropout, grad_out);
  std::vector<torch::Tensor> before(2 + parameters.size());
  if (block.before_proj) {
    std::vector<torch::Tensor> in_wrt = {x, embedded};
    in_wrt.insert(in_wrt.end(), parameters.begin(), parameters.end());
    before = gradients_of({in}, {inner[0]}, in_wrt);
  } else {
    before[0] = inner[0];
  }
  std::vector<torch::Tensor> result = {before[0], inner[1], inner[2], before[1]};
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    torch::Tensor sum;
    for (const torch::Tensor& g : {hint[1 + i], inner[3 + i], before[2 + i]})
      if (g.defined()) sum = sum.defined() ? sum + g : g;
    result.push_back(sum);
  }
  return result;
}

}  // namespace wan
