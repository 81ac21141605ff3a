#pragma once
// A model family's decoder from its latents to pixels: what previews, `wanfw decode` and
// `wanfw sample --video` show. A model plugin provides one through
// PluginDescriptor::make_decoder, from its own options (the Wan models: model.vae), so the host
// decodes any family's latents without knowing the family.

#include <string>

#include <ATen/core/Tensor.h>

namespace wanfw {

class VideoDecoder {
 public:
  virtual ~VideoDecoder() = default;
  /// The model's latents [B, C, T, h, w], as Model::sample writes them -> video [B, 3, F, H, W]
  /// in [-1, 1], float32, on the CPU.
  virtual at::Tensor decode(const at::Tensor& latents) = 0;
  /// Frames a second the family's videos play at.
  virtual double fps() const = 0;
  /// One line for the log: which decoder, from where, in which dtype, on which device.
  virtual std::string describe() const = 0;
};

}  // namespace wanfw
