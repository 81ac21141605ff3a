// Fuzz target: the glue that loads a Wan VAE's weights (libs/wan_vae/autoencoder: vae_names.cpp),
// on a safetensors file standing for the weights of the tiny VAE in tests/fuzz/models/tiny_vae:
// its names in diffusers' or the official form matched to the VAE's parameters and shapes, then
// every matched tensor through the tensor gate as load_vae reads it. Every input either fails with
// a wanfw::Error or gives each parameter exactly one tensor of its shape, read as finite float32
// values; a crash, a sanitizer report or another exception is a finding.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "fuzz_memory_file.hpp"
#include "fuzz_target.hpp"
#include "vae_names.hpp"
#include "wan/vae/vae_config.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/io/tensor_check.hpp"

namespace {

const std::filesystem::path kModel = WANFW_FUZZ_TINY_VAE;  // tests/fuzz/models/tiny_vae

/// The tiny VAE's config and its parameters' diffusers names and shapes, from its own weights.
struct TinyVae {
  wan::VaeConfig config = wan::read_vae_config(kModel / "config.json");
  std::map<std::string, std::vector<std::int64_t>> parameters;
  TinyVae() {
    const auto file = wanfw::SafetensorsCheckpoint::open(kModel / "diffusion_pytorch_model.safetensors");
    for (const std::string& name : file.names()) parameters.emplace(name, file.record(name).shape);
  }
};

}  // namespace

WANFW_FUZZ_TARGET(vae_weights) {
  static const TinyVae tiny;
  static MemoryFile file("vae.safetensors");
  file.write(data, size);
  try {
    const auto weights = wanfw::SafetensorsCheckpoint::open(file.path);
    const std::map<std::string, std::string> source = wan::match_vae_tensors(weights, file.path, tiny.config,
                                                                             tiny.parameters);
    if (source.size() != tiny.parameters.size()) std::abort();
    for (const auto& [parameter, shape] : tiny.parameters) {
      const std::string& name = source.at(parameter);
      if (weights.record(name).shape != shape) std::abort();
      const at::Tensor read = wanfw::read_checked(weights.tensor(name), wanfw::TensorRole::weight(), file.path, name,
                                                  at::kFloat);
      if (read.scalar_type() != at::kFloat || read.sizes().vec() != shape || !read.isfinite().all().item<bool>())
        std::abort();
    }
  } catch (const wanfw::Error&) {
    return 0;
  }
  return 0;
}
