#pragma once
// A Wan VAE (2.1 or 2.2) in LibTorch, with diffusers' module names: decode latents to video and
// encode video to latents, one latent frame (four pixel frames) at a time through a causal cache,
// so memory stays flat in the number of frames.
//
//   wan::WanVae vae = wan::load_vae("Wan2.2-TI2V-5B-Diffusers/vae", at::kFloat, device);
//   at::Tensor video = vae->decode_latents(latents);  // [B, 3, 1 + 4 (T - 1), H, W] in [-1, 1]

#include <filesystem>
#include <memory>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "wan/vae/vae_config.hpp"

namespace wan {

class VaeEncoderImpl;
class VaeDecoderImpl;
class CausalConv3dImpl;

/// The encoder's Gaussian per latent: its mean (what sampling and training use) and log-variance
/// (clamped to [-30, 20]). Raw latents: the model's are (raw - latents_mean) / latents_std.
struct LatentDistribution {
  at::Tensor mean, logvar;
};

class WanVaeImpl : public torch::nn::Module {
 public:
  explicit WanVaeImpl(VaeConfig config);
  const VaeConfig& config() const { return config_; }

  /// Raw latents [B, z, T, h, w] -> video [B, 3, 1 + 4 (T - 1), h s, w s] in [-1, 1] (s the
  /// spatial factor), decoded one latent frame at a time into one preallocated output.
  at::Tensor decode(const at::Tensor& latents);
  /// The model's latents ((z - mean) / std per channel) -> video: decode(z).
  at::Tensor decode_latents(const at::Tensor& latents);
  /// Video [B, 3, F, H, W] in [-1, 1] (H, W multiples of the spatial factor; frames past 1 + 4 k
  /// are dropped) -> raw latents' distribution, the first frame alone, then four at a time.
  LatentDistribution encode(const at::Tensor& video);

  /// z -> (z - mean) / std, and back, per latent channel.
  at::Tensor denormalise_latents(const at::Tensor& latents) const;

 private:
  VaeConfig config_;
  std::shared_ptr<VaeEncoderImpl> encoder_;
  std::shared_ptr<VaeDecoderImpl> decoder_;
  std::shared_ptr<CausalConv3dImpl> quant_conv_, post_quant_conv_;
};
TORCH_MODULE(WanVae);

/// A Wan VAE with its weights from `path`: diffusers' vae/ folder (config.json and the
/// safetensors), a pipeline folder holding one, or one safetensors file (diffusers' or the
/// official key names; the version from its latent width). Every parameter must be there with its
/// shape and nothing else may be; a .pth pickle is refused with the command that converts it.
/// The weights are cast to `dtype` on `device`.
WanVae load_vae(const std::filesystem::path& path, at::ScalarType dtype, const c10::Device& device);

/// The config of the VAE at `path` (as load_vae finds it), from the files' headers alone: nothing
/// is loaded. Throws FileError as load_vae does for a missing path, a pickle or a file of another
/// model.
VaeConfig inspect_vae(const std::filesystem::path& path);

/// inspect_vae, and every tensor of the VAE's file through the tensor gate (wanfw/io/tensor_check.hpp):
/// a real floating-point dtype, and with `values` finite values (one read of the file's bytes,
/// its pages dropped after). Throws FileError naming the file, the tensor and its first bad element.
VaeConfig check_vae_weights(const std::filesystem::path& path, bool values);

}  // namespace wan
