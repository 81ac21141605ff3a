// Loading a Wan VAE: where its config and weights are, their names in diffusers' form, and a strict
// check of every name and shape before anything is copied.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <torch/torch.h>

#include "vae_names.hpp"
#include "wan/vae/wan_vae.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/io/tensor_check.hpp"

namespace fs = std::filesystem;

namespace wan {

namespace {

constexpr const char* kConvertHint =
    "convert it once to safetensors (its names are kept): python -c \"import torch, safetensors.torch as st; "
    "st.save_file({k: v.contiguous() for k, v in torch.load('Wan2.1_VAE.pth', map_location='cpu').items()}, "
    "'Wan2.1_VAE.safetensors')\"; or use the vae/ folder of a -Diffusers repository";

/// The folder holding the VAE's config.json for `path`: a vae/ folder, a pipeline folder holding
/// one, the folder of diffusers' weights file; none for another safetensors file.
std::optional<fs::path> config_folder(const fs::path& path) {
  if (fs::is_directory(path)) {
    if (fs::exists(path / "config.json")) return path;
    if (fs::exists(path / "vae" / "config.json")) return path / "vae";
    return std::nullopt;
  }
  if (path.filename().string().starts_with("diffusion_pytorch_model") && fs::exists(path.parent_path() / "config.json"))
    return path.parent_path();
  return std::nullopt;
}

/// Drops the pages of the file mapping `mapped` views once it has been copied: they would
/// otherwise stay in the process's resident set until the file closes, doubling the peak of a
/// load (read again from the file if touched).
void release_pages(const at::Tensor& mapped) {
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(mapped.data_ptr());
  const std::uintptr_t first = (begin + page - 1) / page * page;  // whole pages only: neighbours keep theirs
  const std::uintptr_t last = (begin + static_cast<std::uintptr_t>(mapped.nbytes())) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

/// A VAE's weights must be real floating-point and finite, like every model's.
wanfw::TensorRole vae_weight_role() {
  wanfw::TensorRole role = wanfw::TensorRole::weight();
  role.what = "a VAE weight";
  role.hint = "download the VAE again (or use the one the model was trained with): a Wan VAE's weights are finite "
              "floating-point numbers";
  return role;
}

/// A VAE's weights file, opened (its header), and its config.
struct VaeSource {
  fs::path weights;
  wanfw::SafetensorsCheckpoint file;
  VaeConfig config;
};

VaeSource open_vae(const fs::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".pth" || ext == ".pt" || ext == ".ckpt")
    throw wanfw::FileError(fmt::format("{}: a PyTorch pickle; wanfw reads VAE weights from safetensors only", path.string()),
                           kConvertHint);
  if (!fs::exists(path))
    throw wanfw::FileError(fmt::format("VAE weights {}: no such file or folder", path.string()),
                           "point it at diffusers' vae/ folder, a pipeline folder, or a VAE safetensors file");
  const std::optional<fs::path> folder = config_folder(path);
  const fs::path weights = fs::is_directory(path) && folder ? *folder : path;
  wanfw::SafetensorsCheckpoint file = wanfw::SafetensorsCheckpoint::open(weights);
  VaeConfig config;
  if (folder) {
    config = read_vae_config(*folder / "config.json");
  } else {  // one file without its config: the version from the latent width
    const std::string post = file.contains("post_quant_conv.weight") ? "post_quant_conv.weight" : "conv2.weight";
    if (!file.contains(post))
      throw wanfw::FileError(fmt::format("{}: holds neither post_quant_conv.weight nor conv2.weight: not a Wan VAE",
                                         weights.string()),
                             "point it at a Wan VAE's safetensors, or diffusers' vae/ folder");
    const std::int64_t z = file.record(post).shape.at(0);
    if (z != 16 && z != 48)
      throw wanfw::FileError(fmt::format("{}: {} latent channels; the Wan VAEs have 16 (2.1) or 48 (2.2)",
                                         weights.string(), z),
                             "give the VAE's config.json beside the file");
    config = vae_preset(z == 16 ? "wan2.1-vae" : "wan2.2-vae");
  }
  return VaeSource{weights, std::move(file), std::move(config)};
}

}  // namespace

VaeConfig inspect_vae(const fs::path& path) { return open_vae(path).config; }

VaeConfig check_vae_weights(const fs::path& path, bool values) {
  const auto [weights, file, config] = open_vae(path);
  wanfw::TensorRole role = vae_weight_role();
  role.finite = values;  // without it the gate reads the headers alone: dtypes, no values
  for (const std::string& name : file.names()) {
    const at::Tensor mapped = file.tensor(name);
    wanfw::check_tensor(mapped, role, file.file_of(name), name);
    if (values) release_pages(mapped);
  }
  return config;
}

WanVae load_vae(const fs::path& path, at::ScalarType dtype, const c10::Device& device) {
  const auto [weights, file, config] = open_vae(path);
  WanVae vae(config);
  std::map<std::string, std::vector<std::int64_t>> expected;
  for (const auto& p : vae->named_parameters()) expected.emplace(p.key(), p.value().sizes().vec());
  const std::map<std::string, std::string> source = match_vae_tensors(file, weights, config, expected);
  torch::NoGradGuard no_grad;
  const wanfw::TensorRole role = vae_weight_role();
  for (auto& p : vae->named_parameters()) {
    const std::string& name = source.at(p.key());
    const at::Tensor mapped = file.tensor(name);
    p.value().set_data(wanfw::read_checked(mapped, role, file.file_of(name), name, at::kFloat));
    release_pages(mapped);
  }
  vae->to(device, dtype);
  vae->eval();
  wanfw::log::info(fmt::format("VAE: {} ({} tensors, z {}, {}x{}x{} pixels a latent) from {}, {} on {}", config.name,
                               expected.size(), config.z_dim, config.scale_factor_temporal, config.scale_factor_spatial,
                               config.scale_factor_spatial, weights.string(), c10::toString(dtype), device.str()));
  return vae;
}

}  // namespace wan
