// Fuzz target: a Wan VAE's config.json (diffusers' vae/ folder), read by read_vae_config. Every
// input either reads into dimensions that fit together and are bounded (a decoder could be built
// from them: positive widths, one finite mean and positive std per latent channel, the frames and
// pixels a latent stands for equal to what the blocks make) or fails with a wanfw::Error.
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "fuzz_memory_file.hpp"
#include "fuzz_target.hpp"
#include "wan/vae/vae_config.hpp"
#include "wanfw/error.hpp"

WANFW_FUZZ_TARGET(vae_config) {
  static MemoryFile file("vae-config.json");
  file.write(data, size);
  wan::VaeConfig c;
  try {
    c = wan::read_vae_config(file.path);
  } catch (const wanfw::Error&) {
    return 0;
  }
  const auto z = static_cast<std::size_t>(c.z_dim);
  if (c.base_dim < 1 || c.base_dim > 4096 || c.decoder_base_dim < 1 || c.decoder_base_dim > 4096 || c.z_dim < 1 ||
      c.z_dim > 1024 || c.latents_mean.size() != z || c.latents_std.size() != z || c.dim_mult.size() < 2 ||
      c.dim_mult.size() > 8 || c.temporal_downsample.size() + 1 != c.dim_mult.size())
    std::abort();
  for (std::size_t i = 0; i < z; ++i)
    if (!std::isfinite(c.latents_mean[i]) || !(c.latents_std[i] > 0) || !std::isfinite(c.latents_std[i])) std::abort();
  if (c.frames(3) != 1 + 2 * c.scale_factor_temporal) std::abort();
  if (c.in_channels != 3 * c.patch_size * c.patch_size) std::abort();
  return 0;
}
