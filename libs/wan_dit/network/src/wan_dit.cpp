#include "wan/wan_dit.hpp"

#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/causal_attention.hpp"
#include "wanfw/parallel/distributed.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"

namespace wan {

torch::Tensor sinusoidal_embedding(const torch::Tensor& t, std::int64_t dim) {
  const std::int64_t half = dim / 2;
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(t.device());
  const torch::Tensor frequencies = torch::pow(10000.0, -torch::arange(half, options) / static_cast<double>(half));
  const torch::Tensor angles = t.to(torch::kFloat64).unsqueeze(-1) * frequencies;
  return torch::cat({torch::cos(angles), torch::sin(angles)}, -1).to(torch::kFloat32);
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
    if (placement_.storage().fp8_blocks(ParameterPlace::Block))
      for (auto& m : block->modules(/*include_self=*/false))
        if (auto* linear = m->as<WanLinearImpl>()) linear->quantize_base();
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
  if (c.has_vace()) reset_vace();
}

Recomputation WanDiTImpl::recomputation() const {
  return {lora_dropout.get(), adapter_selection.get(), activation_offload_, recompute_chunks_};
}

std::vector<wanfw::Unit> WanDiTImpl::units(const std::string& prefix) {
  std::vector<wanfw::Unit> units;
  const auto add = [&](torch::nn::ModuleList list, const char* name) {
    for (std::size_t i = 0; list && i < list->size(); ++i) {
      wanfw::Unit unit{fmt::format("{}{}.{}", prefix, name, i), {}};
      for (const auto& item : list[i]->named_parameters(/*recurse=*/true))
        unit.parameters.push_back(unit.name + "." + item.key());
      units.push_back(std::move(unit));
    }
  };
  add(blocks, "blocks");
  add(vace_blocks, "vace_blocks");
  return units;
}

void WanDiTImpl::set_sequence_group(const wanfw::DistributedSession* group) {
  if (group != nullptr && config_.num_heads % group->world_size() != 0)
    throw wanfw::Error(fmt::format("the model's {} attention heads do not split over a sequence-parallel group of {}",
                                   config_.num_heads, group->world_size()),
                       fmt::format("choose strategy.sequence_parallel among the divisors of {}", config_.num_heads));
  sequence_group_ = group != nullptr && group->world_size() > 1 ? group : nullptr;
}

std::array<std::int64_t, 3> WanDiTImpl::token_grid(std::int64_t frames, std::int64_t height, std::int64_t width) const {
  const auto& p = config_.patch;
  return {frames / p[0], height / p[1], width / p[2]};
}

RopeTables WanDiTImpl::rope_for(const std::array<std::int64_t, 3>& grid, const torch::Device& device,
                                std::int64_t first_frame) {
  const auto [f, h, w] = grid;
  const auto key = std::make_tuple(f, h, w, device.str());
  if (first_frame == 0)
    if (auto it = rope_cache_.find(key); it != rope_cache_.end()) return it->second;
  for (int axis = 0; axis < 3; ++axis)
    if (grid[axis] + (axis == 0 ? first_frame : 0) > config_.rope_max_positions)
      throw wanfw::Error(fmt::format("the latent grid reaches position {} along axis {}, beyond RoPE's {}",
                                     grid[axis] + (axis == 0 ? first_frame : 0), axis, config_.rope_max_positions),
                         axis == 0 ? "a causal rollout longer than RoPE's positions needs a local window: its frames "
                                     "keep their absolute positions"
                                   : "use a smaller latent grid");
  torch::NoGradGuard no_grad;
  const torch::Tensor angles = torch::cat(
      {rope_angles_[0].slice(0, first_frame, first_frame + f).view({f, 1, 1, -1}).expand({f, h, w, -1}),
       rope_angles_[1].slice(0, 0, h).view({1, h, 1, -1}).expand({f, h, w, -1}),
       rope_angles_[2].slice(0, 0, w).view({1, 1, w, -1}).expand({f, h, w, -1})},
      -1).reshape({f * h * w, -1});
  const torch::Tensor rotations = torch::polar(torch::ones_like(angles), angles).to(torch::kComplexFloat).to(device);
  if (first_frame != 0) return RopeTables{rotations};
  return rope_cache_.emplace(key, RopeTables{rotations}).first->second;
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

torch::Tensor WanDiTImpl::forward(const torch::Tensor& x_in, const torch::Tensor& t_in,
                                  const torch::Tensor& context_in, const torch::Tensor& y, const VaceInput& vace,
                                  const CausalPass* causal_pass) {
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
  torch::Tensor vace_state = embedded_vace(vace, x_full);  // the branch's running state (VACE)
  const CausalPass causal = causal_pass != nullptr ? *causal_pass : CausalPass{};
  const torch::Tensor t = causal.layout != nullptr ? frame_timesteps(t_in, grid) : t_in;  // [B, F]: per frame

  if (!(t.dim() == 1 || (t.dim() == 2 && t.size(1) == tokens)) || t.size(0) != batch)
    throw wanfw::Error(fmt::format("timesteps have shape {}; expected [{}] or [{}, {}]", c10::str(t.sizes()), batch,
                                   batch, tokens));
  const torch::Tensor sinusoid = sinusoidal_embedding(t, c.freq_dim).to(dtype);  // [B, (L,) freq_dim]
  const torch::Tensor e = time_embedding->forward(sinusoid);                       // [B, (L,) dim]
  torch::Tensor e0 = time_projection->forward(e);
  e0 = e0.unflatten(-1, {6, c.dim});  // [B, 6, dim] or [B, L, 6, dim]
  const torch::Tensor context = text_embedding->forward(padded_context(context_in, batch).to(dtype));

  RopeTables rope = causal.teacher_forcing  // both copies of the frames at positions 0..F-1
                        ? RopeTables{rope_for({grid[0] / 2, grid[1], grid[2]}, x.device()).rotations.repeat({2, 1})}
                        : rope_for(grid, x.device(), causal.first_frame);
  torch::Tensor e_local = e;  // the head's time embedding, for this rank's tokens
  if (sequence_group_ != nullptr) {
    split_.emplace(*sequence_group_, tokens);
    if (split_logged_.insert(tokens).second)
      wanfw::log::info("sequence parallel: ", tokens, " tokens a sample over ", sequence_group_->world_size(),
                       " ranks, ", split_->local(), " a rank",
                       split_->padded() == tokens ? std::string()
                                                  : fmt::format(" ({} padding, masked)", split_->padded() - tokens));
    x = split_->split(x);
    if (vace_state.defined()) vace_state = split_->split(vace_state);
    if (e0.dim() == 4) e0 = split_->split(e0);  // per-token timesteps (ti2v)
    if (e.dim() == 3) e_local = split_->split(e);
    if (split_->padded() != tokens)  // padded tokens rotate by nothing; attention masks them
      rope.rotations = torch::cat({rope.rotations, torch::ones({split_->padded() - tokens, rope.rotations.size(1)},
                                                               rope.rotations.options())});
    rope.sequence = &*split_;
  }
  const bool checkpoint = gradient_checkpointing_ && is_training() && torch::GradMode::is_enabled();
  const std::vector<CausalAttention> attention =
      causal_blocks(causal, grid, blocks->size(), vace_state.defined());
  const torch::Tensor embedded = x;  // the first VACE block adds the embedded latents
  std::size_t hint = 0;             // the next VACE block
  for (std::size_t i = 0; i < blocks->size(); ++i) {
    auto* b = blocks[i]->as<WanBlock>();
    RopeTables block_rope = rope;  // a causal forward's: this block's cache, or the mask
    if (!attention.empty()) block_rope.causal = &attention[i];
    const auto block = [&](const std::vector<torch::Tensor>& in) {
      return std::vector<torch::Tensor>{checkpoint ? checkpointed_block(*b, {in[0], in[1], in[2], block_rope},
                                                                        recomputation())
                                                   : b->forward(in[0], in[1], in[2], block_rope)};
    };
    x = wanfw::run_unit(unit_runner_, first_unit_ + i, {x, e0, context}, block).at(0);
    if (hint < c.vace_layers.size() && c.vace_layers[hint] == static_cast<std::int64_t>(i)) {
      const auto [state, added] = vace_unit(hint, vace_state, embedded, e0, context, rope, checkpoint);
      vace_state = state;
      const double scale = vace.scales.empty() ? 1.0 : vace.scales.size() == 1 ? vace.scales[0] : vace.scales.at(hint);
      x = scale == 1.0 ? x + added : x + added * scale;
      ++hint;
    }
  }
  x = head(x, e_local);  // [B, L, patch_volume * out_dim]
  if (sequence_group_ != nullptr) x = split_->gather(x);

  // Unpatchify: (F, H, W, pt, ph, pw, C) -> (C, F*pt, H*ph, W*pw).
  const auto& p = c.patch;
  x = x.view({batch, grid[0], grid[1], grid[2], p[0], p[1], p[2], c.out_dim});
  x = x.permute({0, 7, 1, 4, 2, 5, 3, 6});
  return x.reshape({batch, c.out_dim, grid[0] * p[0], grid[1] * p[1], grid[2] * p[2]});
}

}  // namespace wan
