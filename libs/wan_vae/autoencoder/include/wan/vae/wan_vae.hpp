#pragma once
// A Wan VAE (2.1 or 2.2) in LibTorch, with diffusers' module names: decode latents to video and
// encode video to latents, one latent frame (four pixel frames) at a time through a causal cache,
// so memory stays flat in the number of frames.
//
//   wan::WanVae vae = wan::load_vae("Wan2.2-TI2V-5B-Diffusers/vae", at::kFloat, device);
//   at::Tensor video = vae->decode_latents(latents);  // [B, 3, 1 + 4 (T - 1), H, W] in [-1, 1]

#include <cstdint>
#include <filesystem>
#include <memory>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "wan/vae/vae_config.hpp"

namespace wan {

class VaeEncoderImpl;
class VaeDecoderImpl;
class CausalConv3dImpl;
class FeatureCache;
class WanVaeImpl;

/// One video's latents decoded as they come, chunk after chunk in order: the causal cache carries
/// over between calls, so each chunk's frames are those decode() makes of them inside the whole
/// video, and are final when next() returns (a streaming model's chunks, written as it goes).
class VaeDecodeStream {
 public:
  explicit VaeDecodeStream(WanVaeImpl& vae);
  ~VaeDecodeStream();
  VaeDecodeStream(const VaeDecodeStream&) = delete;
  VaeDecodeStream& operator=(const VaeDecodeStream&) = delete;
  /// The next raw latents [B, z, t, h, w] -> their video frames [B, 3, f, h s, w s] in [-1, 1]:
  /// 1 + 4 (t - 1) frames for the video's first latents, 4 t after.
  at::Tensor next(const at::Tensor& latents);

 private:
  WanVaeImpl& vae_;
  std::unique_ptr<FeatureCache> cache_;
  std::int64_t decoded_ = 0;  ///< latent frames so far
};

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
  /// decode() chunk after chunk (VaeDecodeStream); the stream keeps a reference to this VAE.
  std::unique_ptr<VaeDecodeStream> decode_stream();
  /// The model's latents ((z - mean) / std per channel) -> video: decode(z).
  at::Tensor decode_latents(const at::Tensor& latents);
  /// Video [B, 3, F, H, W] in [-1, 1] (H, W multiples of the spatial factor; frames past 1 + 4 k
  /// are dropped) -> raw latents' distribution, the first frame alone, then four at a time.
  LatentDistribution encode(const at::Tensor& video);

  /// z -> (z - mean) / std, and back, per latent channel.
  at::Tensor denormalise_latents(const at::Tensor& latents) const;

 private:
  friend class VaeDecodeStream;
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
