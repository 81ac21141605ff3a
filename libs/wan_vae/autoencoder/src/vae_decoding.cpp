#include "wan/vae/vae_decoding.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/vae/wan_vae.hpp"

namespace wan {

namespace {

using wanfw::option;
using T = wanfw::OptionType;

// The frame rates a preview may play at: slower is a slide show, faster than players show.
constexpr double kLeastFps = 1;
constexpr double kMostFps = 240;

class VaeVideoDecoder final : public wanfw::VideoDecoder {
 public:
  VaeVideoDecoder(WanVae vae, double fps, std::string source, c10::Device device)
      : vae_(std::move(vae)), fps_(fps), source_(std::move(source)), device_(device) {}

  wanfw::LatentLayout latent_layout() const override {
    const VaeConfig& c = vae_->config();
    return {c.z_dim, c.scale_factor_temporal, c.scale_factor_spatial};
  }
  at::Tensor decode(const at::Tensor& latents) override {
    const at::Tensor on_device = latents.to(device_, at::kFloat);
    return vae_->decode_latents(on_device).to(at::kCPU, at::kFloat);
  }
  std::unique_ptr<wanfw::VideoStream> stream() override {
    /// The model's latents of one video, chunk after chunk, through the VAE's causal cache.
    class Stream final : public wanfw::VideoStream {
     public:
      Stream(WanVae vae, c10::Device device) : vae_(std::move(vae)), device_(device), stream_(vae_->decode_stream()) {}
      at::Tensor next(const at::Tensor& latents) override {
        const at::Tensor raw = vae_->denormalise_latents(latents.to(device_, at::kFloat));
        return stream_->next(raw).to(at::kCPU, at::kFloat);
      }

     private:
      WanVae vae_;  ///< held: the stream refers to it
      c10::Device device_;
      std::unique_ptr<VaeDecodeStream> stream_;
    };
    return std::make_unique<Stream>(vae_, device_);
  }
  double fps() const override { return fps_; }
  std::string describe() const override {
    return fmt::format("decoder: the {} ({}), {} on {}, {} frames a second", vae_->config().name, source_,
                       c10::toString(vae_->parameters().front().scalar_type()), device_.str(), fps_);
  }

 private:
  WanVae vae_;
  double fps_;
  std::string source_;
  c10::Device device_;
};

/// Option vae_fps, refused outside 0 (the VAE's own rate) and [kLeastFps, kMostFps].
double checked_fps(const wanfw::Options& o) {
  const double fps = o.number("vae_fps");
  if (fps != 0 && !(fps >= kLeastFps && fps <= kMostFps))
    o.fail("vae_fps", fmt::format("{} frames a second: a preview plays at {} to {}", fps, kLeastFps, kMostFps),
           "set 0 for the VAE's own rate (16 for Wan2.1's VAE, 24 for Wan2.2's), or a rate in that range");
  return fps;
}

}  // namespace

std::vector<wanfw::OptionSpec> vae_options() {
  return {
      option("vae", T::String)
          .value("\"\"")
          .doc("The Wan VAE that decodes previews and samples to video: diffusers' vae/ folder, a pipeline folder "
               "holding one, or a VAE safetensors file (Wan2.1's for Wan2.1 and the A14B models, Wan2.2's for "
               "TI2V-5B). Empty: previews show latent channels."),
      option("vae_dtype", T::Choice)
          .value("float32")
          .choices({"float32", "bfloat16"})
          .doc("The VAE's weights and compute dtype; bfloat16 halves its memory and time on GPUs."),
      option("vae_fps", T::Number)
          .value("0")
          .doc("Frames a second of decoded video, 1 to 240; 0: 16 for Wan2.1's VAE, 24 for Wan2.2's."),
  };
}

void check_vae_option(const wanfw::Options& o, std::int64_t latent_channels, bool read_weights) {
  checked_fps(o);
  const std::string path = o.string("vae");
  if (path.empty()) return;
  VaeConfig config;
  try {
    config = check_vae_weights(path, read_weights);
  } catch (const wanfw::FileError& e) {
    o.fail("vae", e.what());
  }
  if (config.z_dim != latent_channels)
    o.fail("vae",
           fmt::format("{} is a VAE of {} latent channels; this model's latents have {}", path, config.z_dim,
                       latent_channels),
           "use the VAE the model was trained with: Wan2.1's for Wan2.1 and the A14B models, Wan2.2's for TI2V-5B");
}

std::unique_ptr<wanfw::VideoDecoder> make_vae_decoder(const wanfw::Options& o, const wanfw::PluginContext& context) {
  const std::string path = o.string("vae");
  if (path.empty()) return nullptr;  // previews stay latent images
  const at::ScalarType dtype = o.dtype("vae_dtype");
  WanVae vae = load_vae(path, dtype, context.device);
  double fps = checked_fps(o);
  if (fps == 0) fps = vae->config().z_dim == 48 ? 24.0 : 16.0;
  return std::make_unique<VaeVideoDecoder>(std::move(vae), fps, path, context.device);
}

}  // namespace wan
