// Fuzz target: the latents file `wanfw decode` reads (core/src/media/decode_inputs.cpp:
// read_latents), against the Wan2.1 VAE's layout (16 channels, 4 frames and 8 pixels a latent).
// Every input either fails with a wanfw::Error or gives latents [B, 16, T, h, w], every size at
// least 1, finite; a crash, a sanitizer report or another exception is a finding.
#include <cstdint>
#include <cstdlib>

#include <ATen/ATen.h>

#include "fuzz_memory_file.hpp"
#include "fuzz_target.hpp"
#include "media/decode_inputs.hpp"
#include "wanfw/error.hpp"

WANFW_FUZZ_TARGET(decode_latents) {
  static MemoryFile file("latents.safetensors");
  file.write(data, size);
  try {
    const wanfw::SafetensorsFile opened = wanfw::SafetensorsFile::open(file.path);
    const at::Tensor latents = wanfw::read_latents(opened, file.path, wanfw::LatentLayout{16, 4, 8});
    if (latents.dim() != 5 || latents.size(1) != 16 || latents.numel() < 1 || !at::isFloatingType(latents.scalar_type()) ||
        !latents.isfinite().all().item<bool>())
      std::abort();
  } catch (const wanfw::Error&) {
    return 0;
  }
  return 0;
}
