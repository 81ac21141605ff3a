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

/// Checks option `vae` before training starts (the decoder itself is built at the first preview):
/// its files open and its latents have `latent_channels` channels, the model's. Nothing is loaded.
void check_vae_option(const wanfw::Options& options, std::int64_t latent_channels);

/// The VAE of option `vae` on `context.device`; null when `vae` is empty.
std::unique_ptr<wanfw::VideoDecoder> make_vae_decoder(const wanfw::Options& options, const wanfw::PluginContext& context);

}  // namespace wan
