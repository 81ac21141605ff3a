// The Wan VAE (libs/wan_vae) on tensors from a file, for the parity tests against diffusers.
//
//   wanfw_test_tools vae VAE IN.safetensors OUT.safetensors [bf16]
//
// IN may hold "latents" (raw, [B, z, T, h, w]: OUT gets "video", decoded), "normalised" (the
// model's latents: OUT gets "video_from_normalised") and "video" ([B, 3, F, H, W]: OUT gets "mean"
// and "logvar", encoded). Outputs are float32.

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "wan/vae/wan_vae.hpp"
#include "tools.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

int vae_tool(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fputs("usage: wanfw_test_tools vae VAE IN.safetensors OUT.safetensors [bf16]\n", stderr);
    return 2;
  }
  try {
    const at::ScalarType dtype = argc == 5 && std::string(argv[4]) == "bf16" ? at::kBFloat16 : at::kFloat;
    wan::WanVae vae = wan::load_vae(argv[1], dtype, torch::kCPU);
    const auto in = wanfw::SafetensorsFile::open(argv[2]);
    std::vector<std::pair<std::string, at::Tensor>> out;
    if (in.contains("latents")) out.emplace_back("video", vae->decode(in.load("latents")).to(at::kFloat));
    if (in.contains("normalised"))
      out.emplace_back("video_from_normalised", vae->decode_latents(in.load("normalised")).to(at::kFloat));
    if (in.contains("video")) {
      const wan::LatentDistribution d = vae->encode(in.load("video"));
      out.emplace_back("mean", d.mean.to(at::kFloat).contiguous());
      out.emplace_back("logvar", d.logvar.to(at::kFloat).contiguous());
    }
    wanfw::write_safetensors(argv[3], out);
    return 0;
  } catch (const wanfw::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
