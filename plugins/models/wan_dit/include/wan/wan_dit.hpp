#pragma once
// The Wan DiT (Wan2.1 / Wan2.2 blocks) as LibTorch modules, registered under the official
// checkpoint names so that loading an official checkpoint is a lookup.

#include <array>
#include <optional>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "wan/wan_config.hpp"

namespace wan {

/// RMSNorm over the whole hidden dim (all heads), computed in fp32, with a learnable weight.
class WanRMSNormImpl : public torch::nn::Module {
 public:
  WanRMSNormImpl(std::int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(WanRMSNorm);

/// cos/sin tables of the 3-D RoPE for one token grid, [tokens, head_dim / 2] each (float64).
struct RopeTables {
  torch::Tensor cos;
  torch::Tensor sin;
};

/// Multi-head attention with q/k RMSNorm; self-attention applies RoPE, cross-attention does not.
class WanAttentionImpl : public torch::nn::Module {
 public:
  WanAttentionImpl(std::int64_t dim, std::int64_t num_heads, double eps);
  /// `x` [B, L, dim]; `context` [B, Lc, dim] for cross-attention, or undefined for self-attention.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, const RopeTables* rope);
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  WanRMSNorm norm_q{nullptr}, norm_k{nullptr};

 private:
  std::int64_t num_heads_;
};
TORCH_MODULE(WanAttention);

class WanBlockImpl : public torch::nn::Module {
 public:
  explicit WanBlockImpl(const WanConfig& config);
  /// `e0`: the time projection, [B, 6, dim] or [B, L, 6, dim] (one timestep per token).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& e0, const torch::Tensor& context,
                        const RopeTables& rope);
  WanAttention self_attn{nullptr}, cross_attn{nullptr};
  torch::nn::LayerNorm norm3{nullptr};
  torch::nn::Sequential ffn{nullptr};
  torch::Tensor modulation;

 private:
  double eps_;
  std::int64_t dim_;
};
TORCH_MODULE(WanBlock);

class WanHeadImpl : public torch::nn::Module {
 public:
  explicit WanHeadImpl(const WanConfig& config);
  /// `e`: the time embedding, [B, dim] or [B, L, dim].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& e);
  torch::nn::Linear head{nullptr};
  torch::Tensor modulation;

 private:
  double eps_;
  std::int64_t dim_;
};
TORCH_MODULE(WanHead);

/// The whole DiT: patchify, text and time conditioning, blocks, head, unpatchify.
class WanDiTImpl : public torch::nn::Module {
 public:
  explicit WanDiTImpl(WanConfig config);

  /// `x` [B, in_dim - y_channels, F, H, W] noisy latents; `t` [B] or [B, tokens] timesteps on the
  /// 0..1000 scale; `context` [B, Lc, text_dim]; `y` (optional) [B, C_y, F, H, W] concatenated
  /// to `x` along channels (I2V). Returns [B, out_dim, F, H, W].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                        const torch::Tensor& y = {});

  /// The official initialisation (xavier linears, N(0, 0.02) embeddings, zero head).
  void reset_parameters();
  const WanConfig& config() const { return config_; }
  /// Tokens of a latent of F x H x W after patching.
  std::array<std::int64_t, 3> token_grid(std::int64_t frames, std::int64_t height, std::int64_t width) const;

  torch::nn::Conv3d patch_embedding{nullptr};
  torch::nn::Sequential text_embedding{nullptr}, time_embedding{nullptr}, time_projection{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  WanHead head{nullptr};

 private:
  RopeTables rope_for(const std::array<std::int64_t, 3>& grid, const torch::Device& device) const;

  WanConfig config_;
  std::array<torch::Tensor, 3> rope_angles_;  ///< [max_positions, part / 2] float64, per axis
};
TORCH_MODULE(WanDiT);

/// Sinusoidal embedding of timesteps `t` (any shape) into `dim` channels, cos half first,
/// computed in float64 and returned as float32: [..., dim].
torch::Tensor sinusoidal_embedding(const torch::Tensor& t, std::int64_t dim);

}  // namespace wan
