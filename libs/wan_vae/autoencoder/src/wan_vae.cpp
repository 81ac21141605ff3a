#include "wan/vae/wan_vae.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/vae/causal_conv3d.hpp"
#include "wan/vae/space_time_shuffle.hpp"
#include "vae_decoder.hpp"
#include "wan/vae/feature_cache.hpp"
#include "vae_encoder.hpp"
#include "wanfw/error.hpp"

namespace wan {

namespace {

at::Tensor channel_values(const std::vector<double>& values, const at::Tensor& like) {
  return at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(like.options()).view({1, -1, 1, 1, 1});
}

}  // namespace

WanVaeImpl::WanVaeImpl(VaeConfig config) : config_(std::move(config)) {
  config_.validate();
  const std::array<std::int64_t, 3> k1{1, 1, 1};
  encoder_ = register_module("encoder", std::make_shared<VaeEncoderImpl>(config_));
  quant_conv_ = register_module("quant_conv", std::make_shared<CausalConv3dImpl>(2 * config_.z_dim, 2 * config_.z_dim, k1));
  post_quant_conv_ = register_module("post_quant_conv", std::make_shared<CausalConv3dImpl>(config_.z_dim, config_.z_dim, k1));
  decoder_ = register_module("decoder", std::make_shared<VaeDecoderImpl>(config_));
}

VaeDecodeStream::VaeDecodeStream(WanVaeImpl& vae) : vae_(vae), cache_(std::make_unique<FeatureCache>()) {}

VaeDecodeStream::~VaeDecodeStream() = default;

at::Tensor VaeDecodeStream::next(const at::Tensor& latents) {
  const VaeConfig& config = vae_.config_;
  if (latents.dim() != 5 || latents.size(1) != config.z_dim)
    throw wanfw::Error(fmt::format("the VAE decodes latents [B, {}, T, h, w], not {}", config.z_dim,
                                   c10::str(latents.sizes())));
  torch::NoGradGuard no_grad;
  const at::Tensor x = vae_.post_quant_conv_->forward(latents.to(vae_.post_quant_conv_->weight.options()));
  at::Tensor video;
  std::int64_t written = 0;
  // Frames of these latents: the whole video's less those of the latents before them.
  const std::int64_t frames =
      config.frames(decoded_ + x.size(2)) - (decoded_ == 0 ? 0 : config.frames(decoded_));
  for (std::int64_t i = 0; i < x.size(2); ++i, ++decoded_) {
    cache_->start_chunk();
    const at::Tensor chunk =
        unpatchify(vae_.decoder_->forward(x.narrow(2, i, 1), cache_.get(), decoded_ == 0), config.patch_size)
            .clamp(-1.0, 1.0);
    if (!video.defined())
      video = at::empty({chunk.size(0), chunk.size(1), frames, chunk.size(3), chunk.size(4)}, chunk.options());
    video.narrow(2, written, chunk.size(2)).copy_(chunk);
    written += chunk.size(2);
  }
  return video;
}

at::Tensor WanVaeImpl::decode(const at::Tensor& latents) { return VaeDecodeStream(*this).next(latents); }

std::unique_ptr<VaeDecodeStream> WanVaeImpl::decode_stream() { return std::make_unique<VaeDecodeStream>(*this); }

at::Tensor WanVaeImpl::decode_latents(const at::Tensor& latents) { return decode(denormalise_latents(latents)); }

LatentDistribution WanVaeImpl::encode(const at::Tensor& video) {
  const std::int64_t s = config_.scale_factor_spatial;
  if (video.dim() != 5 || video.size(1) != 3 || video.size(3) % s != 0 || video.size(4) % s != 0)
    throw wanfw::Error(fmt::format("the VAE encodes video [B, 3, F, H, W] with H and W multiples of {}, not {}", s,
                                   c10::str(video.sizes())));
  torch::NoGradGuard no_grad;
  const at::Tensor x = patchify(video.to(quant_conv_->weight.options()), config_.patch_size);
  FeatureCache cache;
  std::vector<at::Tensor> chunks;
  const std::int64_t steps = 1 + (x.size(2) - 1) / config_.scale_factor_temporal;
  for (std::int64_t i = 0; i < steps; ++i) {
    cache.start_chunk();
    const at::Tensor frames = i == 0 ? x.narrow(2, 0, 1)
                                     : x.narrow(2, 1 + config_.scale_factor_temporal * (i - 1),
                                                config_.scale_factor_temporal);
    chunks.push_back(encoder_->forward(frames, &cache));
  }
  const auto halves = quant_conv_->forward(at::cat(chunks, 2)).chunk(2, 1);
  return {halves[0], halves[1].clamp(-30.0, 20.0)};
}

at::Tensor WanVaeImpl::denormalise_latents(const at::Tensor& latents) const {
  return latents * channel_values(config_.latents_std, latents) + channel_values(config_.latents_mean, latents);
}

}  // namespace wan
