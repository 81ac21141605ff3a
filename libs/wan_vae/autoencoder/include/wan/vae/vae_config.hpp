#pragma once
// The dimensions of a Wan VAE: the Wan2.1 VAE (16 latent channels, 8x8 pixels and 4 frames a
// latent) and the Wan2.2 VAE (48 channels, 16x16 and 4: residual blocks around a 2x2 patchify),
// as diffusers' vae/config.json describes them, with each latent channel's mean and std.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace wan {

struct VaeConfig {
  std::string name;                  ///< "wan2.1-vae", "wan2.2-vae", or the file it was read from
  std::int64_t base_dim = 96;        ///< the encoder's first width
  std::int64_t decoder_base_dim = 96;
  std::int64_t z_dim = 16;           ///< latent channels
  std::vector<std::int64_t> dim_mult = {1, 2, 4, 4};
  std::int64_t num_res_blocks = 2;
  std::vector<bool> temporal_downsample = {false, true, true};  ///< config.json: temperal_downsample
  bool is_residual = false;          ///< Wan2.2: residual down and up blocks
  std::int64_t in_channels = 3;      ///< pixels' channels after patchify (12 for Wan2.2: 3 x 2 x 2)
  std::int64_t out_channels = 3;
  std::int64_t patch_size = 1;       ///< 1: none
  std::int64_t scale_factor_temporal = 4;
  std::int64_t scale_factor_spatial = 8;
  std::vector<double> latents_mean, latents_std;  ///< per latent channel: z = latents * std + mean

  /// Pixel frames for `latent_frames`: 1 + 4 (T - 1).
  std::int64_t frames(std::int64_t latent_frames) const;
  /// Throws wanfw::Error when the dimensions do not fit together.
  void validate() const;
};

/// "wan2.1-vae" or "wan2.2-vae", with the released mean and std.
VaeConfig vae_preset(const std::string& name);

/// diffusers' vae/config.json; unknown keys are ignored, a missing one takes the Wan2.1 default,
/// and a key wanfw cannot build (attention in the down blocks) is refused naming it.
VaeConfig read_vae_config(const std::filesystem::path& path);

}  // namespace wan
