#include "wan/wan_dit.hpp"

#include <cmath>

#include <fmt/format.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"

namespace wan {

namespace F = torch::nn::functional;

torch::Tensor sinusoidal_embedding(const torch::Tensor& t, std::int64_t dim) {
  const std::int64_t half = dim / 2;
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(t.device());
  const torch::Tensor frequencies = torch::pow(10000.0, -torch::arange(half, options) / static_cast<double>(half));
  const torch::Tensor angles = t.to(torch::kFloat64).unsqueeze(-1) * frequencies;
  return torch::cat({torch::cos(angles), torch::sin(angles)}, -1).to(torch::kFloat32);
}

namespace {

/// Non-affine LayerNorm in fp32 (norm1, norm2, head norm).
torch::Tensor plain_layer_norm(const torch::Tensor& x, std::int64_t dim, double eps) {
  return torch::layer_norm(x.to(torch::kFloat32), {dim}, {}, {}, eps);
}

/// Rotates consecutive channel pairs of `x` [B, L, H, D] by the rotations [L, D/2], in float32.
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope) {
  const auto sizes = x.sizes();
  const torch::Tensor pairs = torch::view_as_complex(
      x.to(torch::kFloat32).reshape({sizes[0], sizes[1], sizes[2], sizes[3] / 2, 2}).contiguous());
  return torch::view_as_real(pairs * rope.rotations.unsqueeze(1)).reshape(sizes).to(x.scalar_type());
}

/// The six (or two) modulation chunks of `table + e`, each broadcastable against [B, L, dim].
std::vector<torch::Tensor> modulation_chunks(const torch::Tensor& table, const torch::Tensor& e, int count) {
  if (e.dim() == 3) return (table + e.to(torch::kFloat32)).chunk(count, 1);  // [B, count, dim] -> [B, 1, dim]
  std::vector<torch::Tensor> chunks = (table.unsqueeze(0) + e.to(torch::kFloat32)).chunk(count, 2);
  for (auto& c : chunks) c = c.squeeze(2);  // [B, L, 1, dim] -> [B, L, dim]
  return chunks;
}

}  // namespace

WanRMSNormImpl::WanRMSNormImpl(std::int64_t dim, double eps) : dim_(dim), eps_(eps) { reset(); }

void WanRMSNormImpl::reset() { weight = register_parameter("weight", torch::ones({dim_})); }

torch::Tensor WanRMSNormImpl::forward(const torch::Tensor& x) {
  const torch::Tensor xf = x.to(torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps_)).to(x.scalar_type()) * weight;
}

WanAttentionImpl::WanAttentionImpl(std::int64_t dim, std::int64_t num_heads, double eps)
    : dim_(dim), num_heads_(num_heads), eps_(eps) {
  reset();
}

void WanAttentionImpl::reset() {
  q = register_module("q", WanLinear(dim_, dim_));
  k = register_module("k", WanLinear(dim_, dim_));
  v = register_module("v", WanLinear(dim_, dim_));
  o = register_module("o", WanLinear(dim_, dim_));
  norm_q = register_module("norm_q", WanRMSNorm(dim_, eps_));
  norm_k = register_module("norm_k", WanRMSNorm(dim_, eps_));
}

torch::Tensor WanAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context, const RopeTables* rope) {
  const torch::Tensor& source = context.defined() ? context : x;
  const std::int64_t batch = x.size(0);
  auto heads = [&](const torch::Tensor& t) { return t.view({batch, t.size(1), num_heads_, -1}); };
  torch::Tensor query = heads(norm_q(q(x)));
  torch::Tensor key = heads(norm_k(k(source)));
  const torch::Tensor value = heads(v(source));
  if (rope != nullptr) {
    query = apply_rope(query, *rope);
    key = apply_rope(key, *rope);
  }
  // [B, L, H, D] -> [B, H, L, D] for the fused attention kernels.
  const torch::Tensor out = at::scaled_dot_product_attention(query.transpose(1, 2), key.transpose(1, 2),
                                                             value.transpose(1, 2));
  return o(out.transpose(1, 2).flatten(2).to(x.scalar_type()));
}

WanBlockImpl::WanBlockImpl(const WanConfig& config) : config_(config) { reset(); }

void WanBlockImpl::reset() {
  const WanConfig& c = config_;
  self_attn = register_module("self_attn", WanAttention(c.dim, c.num_heads, c.eps));
  norm3 = register_module("norm3", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim}).eps(c.eps)));
  cross_attn = register_module("cross_attn", WanAttention(c.dim, c.num_heads, c.eps));
  ffn = register_module("ffn", torch::nn::Sequential(WanLinear(c.dim, c.ffn_dim),
                                                     torch::nn::GELU(torch::nn::GELUOptions().approximate("tanh")),
                                                     WanLinear(c.ffn_dim, c.dim)));
  modulation = register_parameter("modulation", torch::randn({1, 6, c.dim}) / std::sqrt(static_cast<double>(c.dim)));
}

torch::Tensor WanBlockImpl::forward(const torch::Tensor& x_in, const torch::Tensor& e0, const torch::Tensor& context,
                                    const RopeTables& rope) {
  // shift, scale, gate for self-attention, then for the feed-forward network; all in fp32.
  const double eps = config_.eps;
  const std::int64_t dim = config_.dim;
  const auto e = modulation_chunks(modulation, e0, 6);
  const auto dtype = x_in.scalar_type();
  torch::Tensor x = x_in;
  const torch::Tensor attn_in = (plain_layer_norm(x, dim, eps) * (1 + e[1]) + e[0]).to(dtype);
  x = (x.to(torch::kFloat32) + self_attn(attn_in, torch::Tensor(), &rope) * e[2]).to(dtype);
  // norm3 (affine) in fp32 whatever the weights' dtype.
  const auto f32 = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
  const torch::Tensor normed = torch::layer_norm(f32(x), {dim}, f32(norm3->weight), f32(norm3->bias), eps);
  x = x + cross_attn(normed.to(dtype), context, nullptr);
  const torch::Tensor ffn_in = (plain_layer_norm(x, dim, eps) * (1 + e[4]) + e[3]).to(dtype);
  return (x.to(torch::kFloat32) + ffn->forward(ffn_in).to(torch::kFloat32) * e[5]).to(dtype);
}

WanHeadImpl::WanHeadImpl(const WanConfig& config) : config_(config) { reset(); }

void WanHeadImpl::reset() {
  const WanConfig& c = config_;
  head = register_module("head", torch::nn::Linear(c.dim, c.patch[0] * c.patch[1] * c.patch[2] * c.out_dim));
  modulation = register_parameter("modulation", torch::randn({1, 2, c.dim}) / std::sqrt(static_cast<double>(c.dim)));
}

torch::Tensor WanHeadImpl::forward(const torch::Tensor& x, const torch::Tensor& e) {
  const auto chunks = modulation_chunks(modulation, e.dim() == 2 ? e.unsqueeze(1) : e.unsqueeze(2), 2);
  return head((plain_layer_norm(x, config_.dim, config_.eps) * (1 + chunks[1]) + chunks[0]).to(x.scalar_type()));
}

WanDiTImpl::WanDiTImpl(WanConfig config, WanPlacement placement)
    : config_(std::move(config)), placement_(placement) {
  config_.validate();
  // RoPE angles per axis: position x theta^(-2i/d) for the frame, height and width parts.
  const auto split = config_.rope_split();
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  for (int axis = 0; axis < 3; ++axis) {
    const torch::Tensor inverse =
        torch::pow(config_.rope_theta, -torch::arange(0, split[axis], 2, f64) / static_cast<double>(split[axis]));
    rope_angles_[axis] = torch::outer(torch::arange(config_.rope_max_positions, f64), inverse);
  }
  reset();
}

namespace {

/// xavier-uniform weights and zero biases for every Linear in `module` (itself included).
void init_linears(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/true))
    if (auto* linear = m->as<torch::nn::Linear>()) {
      torch::nn::init::xavier_uniform_(linear->weight);
      torch::nn::init::zeros_(linear->bias);
    } else if (auto* adaptable = m->as<WanLinearImpl>()) {
      torch::nn::init::xavier_uniform_(adaptable->weight);
      torch::nn::init::zeros_(adaptable->bias);
    }
}

/// N(0, 0.02) for every weight of an embedding MLP.
void init_embedding(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (const auto& p : module.named_parameters())
    if (p.key().ends_with("weight")) torch::nn::init::normal_(p.value(), 0.0, 0.02);
}

}  // namespace

void WanDiTImpl::reset() {
  const auto& c = config_;
  patch_embedding = register_module(
      "patch_embedding",
      torch::nn::Conv3d(torch::nn::Conv3dOptions(c.in_dim, c.dim, {c.patch[0], c.patch[1], c.patch[2]})
                            .stride({c.patch[0], c.patch[1], c.patch[2]})));
  text_embedding = register_module(
      "text_embedding",
      torch::nn::Sequential(torch::nn::Linear(c.text_dim, c.dim),
                            torch::nn::GELU(torch::nn::GELUOptions().approximate("tanh")),
                            torch::nn::Linear(c.dim, c.dim)));
  time_embedding = register_module(
      "time_embedding",
      torch::nn::Sequential(torch::nn::Linear(c.freq_dim, c.dim), torch::nn::SiLU(), torch::nn::Linear(c.dim, c.dim)));
  time_projection =
      register_module("time_projection", torch::nn::Sequential(torch::nn::SiLU(), torch::nn::Linear(c.dim, 6 * c.dim)));
  // The official initialisation, one part at a time, each placed before the next is built.
  const auto place = [this](torch::nn::Module& part) { part.to(placement_.device, placement_.dtype); };
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::xavier_uniform_(patch_embedding->weight.view({c.dim, -1}));
  }
  place(*patch_embedding);
  for (auto* mlp : {&text_embedding, &time_embedding}) {
    init_linears(**mlp);
    init_embedding(**mlp);
    place(**mlp);
  }
  init_linears(*time_projection);
  place(*time_projection);
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    WanBlock block(c);
    init_linears(*block);
    place(*block);
    blocks->push_back(block);
  }
  head = register_module("head", WanHead(c));
  init_linears(*head);
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::zeros_(head->head->weight);
  }
  place(*head);
}

std::array<std::int64_t, 3> WanDiTImpl::token_grid(std::int64_t frames, std::int64_t height, std::int64_t width) const {
  const auto& p = config_.patch;
  return {frames / p[0], height / p[1], width / p[2]};
}

const RopeTables& WanDiTImpl::rope_for(const std::array<std::int64_t, 3>& grid, const torch::Device& device) {
  const auto [f, h, w] = grid;
  const auto key = std::make_tuple(f, h, w, device.str());
  if (auto it = rope_cache_.find(key); it != rope_cache_.end()) return it->second;
  for (int axis = 0; axis < 3; ++axis)
    if (grid[axis] > config_.rope_max_positions)
      throw wanfw::Error(fmt::format("the latent grid has {} positions along axis {}, more than RoPE's {}", grid[axis],
                                     axis, config_.rope_max_positions));
  torch::NoGradGuard no_grad;
  const torch::Tensor angles = torch::cat(
      {rope_angles_[0].slice(0, 0, f).view({f, 1, 1, -1}).expand({f, h, w, -1}),
       rope_angles_[1].slice(0, 0, h).view({1, h, 1, -1}).expand({f, h, w, -1}),
       rope_angles_[2].slice(0, 0, w).view({1, 1, w, -1}).expand({f, h, w, -1})},
      -1).reshape({f * h * w, -1});
  const torch::Tensor rotations = torch::polar(torch::ones_like(angles), angles).to(torch::kComplexFloat).to(device);
  return rope_cache_.emplace(key, RopeTables{rotations}).first->second;
}

namespace {

/// Saves a block's inputs instead of its activations, and recomputes the block in backward.
struct BlockCheckpoint : torch::autograd::Function<BlockCheckpoint> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& e0,
                               const torch::Tensor& context, at::TensorList parameters, WanBlockImpl* block,
                               const RopeTables* rope, LoraDropoutStreams* dropout) {
    ctx->save_for_backward({x, e0, context});
    ctx->saved_data["dropout"] = reinterpret_cast<std::int64_t>(dropout);
    if (dropout != nullptr && dropout->samples()) {  // the recomputation draws the same masks
      const auto& samples = *dropout->samples();
      ctx->saved_data["dropout_ids"] = torch::tensor(samples.ids, torch::kInt64);
      ctx->saved_data["dropout_epoch"] = samples.epoch;
      ctx->saved_data["dropout_seed"] = static_cast<std::int64_t>(samples.seed);
    }
    ctx->saved_data["block"] = reinterpret_cast<std::int64_t>(block);
    ctx->saved_data["rope"] = rope->rotations;
    ctx->saved_data["parameters"] = static_cast<std::int64_t>(parameters.size());
    const auto device_type = x.device().type();
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(device_type);
    ctx->saved_data["autocast_dtype"] = at::autocast::get_autocast_dtype(device_type);
    return block->forward(x, e0, context, *rope);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* block = reinterpret_cast<WanBlockImpl*>(ctx->saved_data["block"].toInt());
    const RopeTables rope{ctx->saved_data["rope"].toTensor()};
    const auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> inputs;
    for (const auto& t : saved) inputs.push_back(t.detach().requires_grad_(t.requires_grad()));

    // Recompute under the forward's grad and autocast state.
    torch::Tensor output;
    {
      torch::AutoGradMode grad(true);
      const auto device_type = inputs[0].device().type();
      const bool autocast_before = at::autocast::is_autocast_enabled(device_type);
      const auto dtype_before = at::autocast::get_autocast_dtype(device_type);
      at::autocast::set_autocast_enabled(device_type, ctx->saved_data["autocast"].toBool());
      at::autocast::set_autocast_dtype(device_type, ctx->saved_data["autocast_dtype"].toScalarType());
      auto* dropout = reinterpret_cast<LoraDropoutStreams*>(ctx->saved_data["dropout"].toInt());
      std::optional<LoraDropoutStreams::Samples> samples_before;
      if (dropout != nullptr) {
        samples_before = dropout->samples();
        std::optional<LoraDropoutStreams::Samples> samples;
        if (ctx->saved_data.count("dropout_ids")) {
          const torch::Tensor ids = ctx->saved_data["dropout_ids"].toTensor();
          samples = LoraDropoutStreams::Samples{std::vector<std::int64_t>(ids.data_ptr<std::int64_t>(),
                                                                          ids.data_ptr<std::int64_t>() + ids.numel()),
                                                ctx->saved_data["dropout_epoch"].toInt(),
                                                static_cast<std::uint64_t>(ctx->saved_data["dropout_seed"].toInt()),
                                                inputs[0].device()};
        }
        dropout->set(samples);
      }
      output = block->forward(inputs[0], inputs[1], inputs[2], rope);
      if (dropout != nullptr) dropout->set(samples_before);
      at::autocast::set_autocast_enabled(device_type, autocast_before);
      at::autocast::set_autocast_dtype(device_type, dtype_before);
    }

    // Differentiate with respect to whatever requires grad: the inputs, then the parameters.
    std::vector<torch::Tensor> wrt;
    std::vector<std::size_t> slot;  // position of each differentiated tensor in the result
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].requires_grad()) wrt.push_back(inputs[i]), slot.push_back(i);
    const auto parameters = block->parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i)
      if (parameters[i].requires_grad()) wrt.push_back(parameters[i]), slot.push_back(inputs.size() + i);
    // One gradient per forward argument: x, e0, context, each parameter, block, rope, dropout.
    torch::autograd::variable_list result(inputs.size() + parameters.size() + 3);
    if (!wrt.empty()) {
      const auto grads = torch::autograd::grad({output}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                               /*create_graph=*/false, /*allow_unused=*/true);
      for (std::size_t i = 0; i < grads.size(); ++i) result[slot[i]] = grads[i];
    }
    return result;
  }
};

}  // namespace

torch::Tensor checkpointed_block(WanBlockImpl& block, const torch::Tensor& x, const torch::Tensor& e0,
                                 const torch::Tensor& context, const RopeTables& rope, LoraDropoutStreams* dropout) {
  const std::vector<torch::Tensor> parameters = block.parameters();
  return BlockCheckpoint::apply(x, e0, context, at::TensorList(parameters), &block, &rope, dropout);
}

torch::Tensor WanDiTImpl::padded_context(const torch::Tensor& context, std::int64_t batch) const {
  const auto& c = config_;
  if (context.dim() != 3 || context.size(0) != batch || context.size(2) != c.text_dim)
    throw wanfw::Error(fmt::format("the text context has shape {}; the model takes [{}, L, {}] (L <= text_len {})",
                                   c10::str(context.sizes()), batch, c.text_dim, c.text_len));
  const std::int64_t length = context.size(1);
  if (length > c.text_len)
    throw wanfw::Error(fmt::format("the text context has {} tokens, more than the model's text_len {}", length,
                                   c.text_len),
                       "the official model pads contexts to text_len and takes no longer ones: cut the text "
                       "encoder's output to text_len tokens (its tokenizer's max length), or raise model.text_len");
  // Zero rows still pass through text_embedding's biases and GELU, so they are real keys and
  // values to cross-attention (which the official model runs without a mask).
  return length == c.text_len ? context : torch::constant_pad_nd(context, {0, 0, 0, c.text_len - length});
}

torch::Tensor WanDiTImpl::forward(const torch::Tensor& x_in, const torch::Tensor& t, const torch::Tensor& context_in,
                                  const torch::Tensor& y) {
  const auto& c = config_;
  // Latents enter in the weights' dtype (float32 inputs to a bfloat16 model, for one).
  const torch::Tensor x_full = (y.defined() ? torch::cat({x_in, y}, 1) : x_in).to(patch_embedding->weight.scalar_type());
  if (x_full.dim() != 5 || x_full.size(1) != c.in_dim)
    throw wanfw::Error(fmt::format("Wan DiT input has shape {} but the model takes [B, {}, F, H, W] (noise and "
                                   "conditioning channels together)",
                                   c10::str(x_full.sizes()), c.in_dim));
  const std::int64_t batch = x_full.size(0);
  const auto grid = token_grid(x_full.size(2), x_full.size(3), x_full.size(4));
  const std::int64_t tokens = grid[0] * grid[1] * grid[2];

  torch::Tensor x = patch_embedding(x_full).flatten(2).transpose(1, 2).contiguous();  // [B, L, dim]
  const auto dtype = x.scalar_type();

  if (!(t.dim() == 1 || (t.dim() == 2 && t.size(1) == tokens)) || t.size(0) != batch)
    throw wanfw::Error(fmt::format("timesteps have shape {}; expected [{}] or [{}, {}]", c10::str(t.sizes()), batch,
                                   batch, tokens));
  const torch::Tensor sinusoid = sinusoidal_embedding(t, c.freq_dim).to(dtype);  // [B, (L,) freq_dim]
  const torch::Tensor e = time_embedding->forward(sinusoid);                       // [B, (L,) dim]
  torch::Tensor e0 = time_projection->forward(e);
  e0 = e0.unflatten(-1, {6, c.dim});  // [B, 6, dim] or [B, L, 6, dim]
  const torch::Tensor context = text_embedding->forward(padded_context(context_in, batch).to(dtype));

  const RopeTables& rope = rope_for(grid, x.device());
  const bool checkpoint = gradient_checkpointing_ && is_training() && torch::GradMode::is_enabled();
  for (const auto& block : *blocks) {
    auto* b = block->as<WanBlock>();
    x = checkpoint ? checkpointed_block(*b, x, e0, context, rope, lora_dropout.get()) : b->forward(x, e0, context, rope);
  }
  x = head(x, e);  // [B, L, patch_volume * out_dim]

  // Unpatchify: (F, H, W, pt, ph, pw, C) -> (C, F*pt, H*ph, W*pw).
  const auto& p = c.patch;
  x = x.view({batch, grid[0], grid[1], grid[2], p[0], p[1], p[2], c.out_dim});
  x = x.permute({0, 7, 1, 4, 2, 5, 3, 6});
  return x.reshape({batch, c.out_dim, grid[0] * p[0], grid[1] * p[1], grid[2] * p[2]});
}

}  // namespace wan
