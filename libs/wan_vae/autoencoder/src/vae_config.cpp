#include "wan/vae/vae_config.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wanfw/io/bounded_input.hpp"
#include "wanfw/error.hpp"

namespace wan {

namespace {

// The released latents' statistics (diffusers' AutoencoderKLWan defaults and the TI2V-5B config).
const std::vector<double> kWan21Mean = {-0.7571, -0.7089, -0.9113, 0.1075,  -0.1745, 0.9653, -0.1517, 1.5508,
                                        0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503, -0.2921};
const std::vector<double> kWan21Std = {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                       3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160};
const std::vector<double> kWan22Mean = {
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174,  0.1838,  0.1557,  -0.1382, 0.0542,  0.2813,  0.0891,
    0.1570,  -0.0098, 0.0375,  -0.1825, -0.2246, -0.1207, -0.0698, 0.5109,  0.2665,  -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109,  0.1567,  -0.0729, 0.0899,  -0.2799, -0.1230, -0.0313, -0.1649, 0.0117,  0.0723,
    -0.2839, -0.2083, -0.0520, 0.3748,  0.0152,  0.1957,  0.1433,  -0.2944, 0.3573,  -0.0548, -0.1681, -0.0667};
const std::vector<double> kWan22Std = {
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
    0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
    0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744};

}  // namespace

std::int64_t VaeConfig::frames(std::int64_t latent_frames) const {
  return latent_frames < 1 ? 0 : 1 + scale_factor_temporal * (latent_frames - 1);
}

void VaeConfig::validate() const {
  const auto fail = [&](const std::string& what) { throw wanfw::Error(fmt::format("VAE {}: {}", name, what)); };
  // Bounds far above the released VAEs (widths 96 to 256, 16 or 48 latent channels), so that a
  // config cannot ask for more than memory holds or overflow the arithmetic below.
  const auto within = [&](const char* key, std::int64_t value, std::int64_t most) {
    if (value < 1 || value > most) fail(fmt::format("{} must be 1 to {}, not {}", key, most, value));
  };
  within("base_dim", base_dim, 4096);
  within("decoder_base_dim", decoder_base_dim, 4096);
  within("z_dim", z_dim, 1024);
  within("num_res_blocks", num_res_blocks, 16);
  within("patch_size", patch_size, 8);
  if (dim_mult.size() < 2 || dim_mult.size() > 8 || temporal_downsample.size() + 1 != dim_mult.size())
    fail(fmt::format("{} dim_mult entries (2 to 8) need {} temperal_downsample entries", dim_mult.size(),
                     dim_mult.size() - 1));
  for (const std::int64_t m : dim_mult) within("each dim_mult", m, 16);
  if (in_channels != 3 * patch_size * patch_size || out_channels != in_channels)
    fail(fmt::format("in_channels and out_channels must be 3 x patch_size^2 ({}), not {} and {}",
                     3 * patch_size * patch_size, in_channels, out_channels));
  if (static_cast<std::int64_t>(latents_mean.size()) != z_dim || static_cast<std::int64_t>(latents_std.size()) != z_dim)
    fail(fmt::format("latents_mean and latents_std need z_dim = {} values, not {} and {}", z_dim, latents_mean.size(),
                     latents_std.size()));
  for (std::size_t i = 0; i < latents_mean.size(); ++i)
    if (!std::isfinite(latents_mean[i]) || !std::isfinite(latents_std[i]) || !(latents_std[i] > 0))
      fail(fmt::format("latent channel {}: mean {} and std {} must be finite, the std positive", i, latents_mean[i],
                       latents_std[i]));
  std::int64_t temporal = 1;
  for (const bool down : temporal_downsample) temporal *= down ? 2 : 1;
  if (temporal != scale_factor_temporal)
    fail(fmt::format("temperal_downsample gives {} frames a latent, scale_factor_temporal says {}", temporal,
                     scale_factor_temporal));
  // Each block but the last halves height and width, and the patchify divides them again.
  const std::int64_t spatial = (std::int64_t{1} << (dim_mult.size() - 1)) * patch_size;
  if (spatial != scale_factor_spatial)
    fail(fmt::format("{} blocks and patch_size {} give {} pixels a latent, scale_factor_spatial says {}",
                     dim_mult.size(), patch_size, spatial, scale_factor_spatial));
}

VaeConfig vae_preset(const std::string& name) {
  VaeConfig c;
  c.name = name;
  if (name == "wan2.1-vae") {
    c.latents_mean = kWan21Mean;
    c.latents_std = kWan21Std;
  } else if (name == "wan2.2-vae") {
    c.base_dim = 160;
    c.decoder_base_dim = 256;
    c.z_dim = 48;
    c.is_residual = true;
    c.in_channels = c.out_channels = 12;
    c.patch_size = 2;
    c.scale_factor_spatial = 16;
    c.latents_mean = kWan22Mean;
    c.latents_std = kWan22Std;
  } else {
    throw wanfw::Error(fmt::format("no VAE preset is named '{}'", name), "use wan2.1-vae or wan2.2-vae");
  }
  return c;
}

VaeConfig read_vae_config(const std::filesystem::path& path) {
  const auto fail = [&](const std::string& what) {
    throw wanfw::FileError(fmt::format("{}: {}", path.string(), what),
                           "point the VAE at diffusers' vae/ folder (config.json beside the safetensors)");
  };
  const nlohmann::json j =
      wanfw::parse_bounded_json(wanfw::read_bounded_file(path, "VAE config", 1 << 20, fail), 8, fail);
  if (!j.is_object()) fail("is not a JSON object");
  VaeConfig c = vae_preset("wan2.1-vae");
  c.name = path.string();
  // Each value's JSON type is checked before converting: an integer field refuses 2.5 (and 1e48,
  // whose conversion to an integer would be undefined), a flag anything but true and false.
  const auto fits = [](const nlohmann::json& v, const auto& into) {
    using T = std::decay_t<decltype(into)>;
    const auto each = [&v](auto&& test) { return v.is_array() && std::all_of(v.begin(), v.end(), test); };
    if constexpr (std::is_same_v<T, std::int64_t>) return v.is_number_integer();
    else if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
    else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>)
      return each([](const nlohmann::json& e) { return e.is_number_integer(); });
    else if constexpr (std::is_same_v<T, std::vector<bool>>)
      return each([](const nlohmann::json& e) { return e.is_boolean(); });
    else
      return each([](const nlohmann::json& e) { return e.is_number(); });
  };
  const auto read = [&](const char* key, auto& into) {
    if (!j.contains(key) || j.at(key).is_null()) return;
    if (!fits(j.at(key), into))
      fail(fmt::format("'{}' is {}, which is not what a Wan VAE takes", key, wanfw::describe_json(j.at(key))));
    j.at(key).get_to(into);
  };
  read("base_dim", c.base_dim);
  c.decoder_base_dim = c.base_dim;
  read("decoder_base_dim", c.decoder_base_dim);
  read("z_dim", c.z_dim);
  read("dim_mult", c.dim_mult);
  read("num_res_blocks", c.num_res_blocks);
  read("temperal_downsample", c.temporal_downsample);
  read("is_residual", c.is_residual);
  read("in_channels", c.in_channels);
  read("out_channels", c.out_channels);
  read("patch_size", c.patch_size);
  read("scale_factor_temporal", c.scale_factor_temporal);
  read("scale_factor_spatial", c.scale_factor_spatial);
  read("latents_mean", c.latents_mean);
  read("latents_std", c.latents_std);
  if (j.contains("attn_scales") && j.at("attn_scales").is_array() && !j.at("attn_scales").empty())
    fail("attn_scales is not empty: the Wan VAEs have no attention in their down and up blocks");
  if (c.patch_size == 0) c.patch_size = 1;
  try {
    c.validate();
  } catch (const wanfw::Error& e) {  // "VAE <path>: <problem>"
    throw wanfw::FileError(e.what(), "a Wan VAE's config.json, as diffusers writes it, holds dimensions that fit");
  }
  c.name = fmt::format("{}-channel Wan VAE", c.z_dim);  // messages name the file beside it
  return c;
}

}  // namespace wan
