#include "wan/vae/vae_decoding.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/vae/wan_vae.hpp"

namespace wan {

namespace {

using wanfw::option;
using T = wanfw::OptionType;

class VaeVideoDecoder final : public wanfw::VideoDecoder {
 public:
  VaeVideoDecoder(WanVae vae, double fps, std::string source, c10::Device device)
      : vae_(std::move(vae)), fps_(fps), source_(std::move(source)), device_(device) {}

  at::Tensor decode(const at::Tensor& latents) override {
    const at::Tensor on_device = latents.to(device_, at::kFloat);
    return vae_->decode_latents(on_device).to(at::kCPU, at::kFloat);
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
      option("vae_fps", T::Number).value("0").doc("Frames a second of decoded video; 0: 16 for Wan2.1's VAE, 24 for Wan2.2's."),
  };
}

void check_vae_option(const wanfw::Options& o, std::int64_t latent_channels) {
  const std::string path = o.string("vae");
  if (path.empty()) return;
  VaeConfig config;
  try {
    config = inspect_vae(path);
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
  const at::ScalarType dtype = o.string("vae_dtype") == "bfloat16" ? at::kBFloat16 : at::kFloat;
  WanVae vae = load_vae(path, dtype, context.device);
  double fps = o.number("vae_fps");
  if (fps < 0) o.fail("vae_fps", "must be 0 (the VAE's own) or positive");
  if (fps == 0) fps = vae->config().z_dim == 48 ? 24.0 : 16.0;
  return std::make_unique<VaeVideoDecoder>(std::move(vae), fps, path, context.device);
}

}  // namespace wan
