#pragma once
// A model family's decoder from its latents to pixels: what previews, `wanfw decode` and
// `wanfw sample --video` show. A model plugin provides one through
// PluginDescriptor::make_decoder, from its own options (the Wan models: model.vae), so the host
// decodes any family's latents without knowing the family.

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// What a decoder takes and makes: latents [B, channels, T, h, w] decode to video
/// [B, 3, 1 + frames_per_latent (T - 1), h pixels_per_latent, w pixels_per_latent].
struct LatentLayout {
  std::int64_t channels = 0;
  std::int64_t frames_per_latent = 1;
  std::int64_t pixels_per_latent = 1;
};

/// One video's latents decoded as they come, chunk after chunk in order (VideoDecoder::stream).
class VideoStream {
 public:
  virtual ~VideoStream() = default;
  /// The next latents [B, C, t, h, w] (the model's, as Model::sample writes them) -> their frames
  /// [B, 3, f, H, W] in [-1, 1], float32, on the CPU: those decode() makes of them in the whole video.
  virtual at::Tensor next(const at::Tensor& latents) = 0;
};

class VideoDecoder {
 public:
  virtual ~VideoDecoder() = default;
  /// The latents decode() takes, so that the host checks a user's file before decoding it.
  virtual LatentLayout latent_layout() const = 0;
  /// The model's latents [B, C, T, h, w], as Model::sample writes them -> video [B, 3, F, H, W]
  /// in [-1, 1], float32, on the CPU.
  virtual at::Tensor decode(const at::Tensor& latents) = 0;
  /// A stream that decodes one video's latents as a streaming model makes them (Model::sample's
  /// `made`); null (the default) where the family decodes whole videos only.
  virtual std::unique_ptr<VideoStream> stream() { return nullptr; }
  /// Frames a second the family's videos play at.
  virtual double fps() const = 0;
  /// One line for the log: which decoder, from where, in which dtype, on which device.
  virtual std::string describe() const = 0;
};

}  // namespace wanfw
