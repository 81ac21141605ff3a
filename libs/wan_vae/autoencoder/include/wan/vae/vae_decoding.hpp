#pragma once
// The Wan model plugins' decoder (PluginDescriptor::make_decoder): the Wan VAE their `vae` option
// names, decoding the model's latents to video for previews, `wanfw decode` and `wanfw sample`.

#include <memory>
#include <vector>

#include "wanfw/decoder.hpp"
#include "wanfw/options.hpp"
#include "wanfw/plugin.hpp"

namespace wan {

/// `vae` (the VAE's folder or file; "" for none), `vae_dtype`, `vae_fps`.
std::vector<wanfw::OptionSpec> vae_options();

/// Checks options `vae` and `vae_fps` before training starts (the decoder itself is built at the
/// first preview): the rate within bounds, the VAE's files open, its tensors of a real
/// floating-point dtype and, with `read_weights` (a run, before its first step), finite; its latents
/// have `latent_channels` channels, the model's. Nothing is kept.
void check_vae_option(const wanfw::Options& options, std::int64_t latent_channels, bool read_weights);

/// The VAE of option `vae` on `context.device`; null when `vae` is empty.
std::unique_ptr<wanfw::VideoDecoder> make_vae_decoder(const wanfw::Options& options, const wanfw::PluginContext& context);

}  // namespace wan
