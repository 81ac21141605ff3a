#include "media/decode_inputs.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"
#include "wanfw/io/tensor_check.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

constexpr const char* kName = "latents";

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

/// The folder `path` names, made when missing and refused when it cannot be written to.
void writable_folder(const fs::path& folder, const fs::path& out) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error || !fs::is_directory(folder))
    throw FileError(fmt::format("--out {}: cannot make the folder {}: {}", out.string(), folder.string(),
                                error ? error.message() : "a file of that name is in the way"),
                    "choose an output where you may write");
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw FileError(fmt::format("--out {}: the folder {} is not writable", out.string(), folder.string()),
                    "choose an output where you may write");
}

}  // namespace

at::Tensor read_latents(const SafetensorsFile& file, const fs::path& path, const LatentLayout& layout) {
  if (!file.contains(kName))
    throw FileError(fmt::format("{}: holds no tensor '{}'", path.string(), kName),
                    "decode what `wanfw sample` wrote, or a file with the model's latents under 'latents'");
  const std::vector<std::int64_t>& shape = file.record(kName).shape;
  const std::string expected =
      fmt::format("[B, {}, T, h, w] (samples, {} latent channels, latent frames, height, width; each at least 1)",
                  layout.channels, layout.channels);
  const bool fits = shape.size() == 5 && shape[1] == layout.channels &&
                    std::all_of(shape.begin(), shape.end(), [](std::int64_t n) { return n >= 1; });
  if (!fits)
    throw FileError(fmt::format("{}: tensor '{}' has shape [{}]; the decoder takes {}", path.string(), kName,
                                fmt::join(shape, ", "), expected),
                    "decode latents this model family samples (`wanfw sample` writes them), with the VAE they were "
                    "made for");
  const double frames = 1.0 + static_cast<double>(layout.frames_per_latent) * static_cast<double>(shape[2] - 1);
  const double pixels = static_cast<double>(shape[3] * layout.pixels_per_latent) *
                        static_cast<double>(shape[4] * layout.pixels_per_latent);
  const double bytes = static_cast<double>(shape[0]) * 3.0 * frames * pixels * 4.0;
  if (bytes > physical_memory_bytes())
    throw FileError(fmt::format("{}: tensor '{}' of shape [{}] decodes to {:.0f} frames of {}x{} a sample, {:.1f} GiB "
                                "of float32 video: more than this machine's {:.1f} GiB of memory",
                                path.string(), kName, fmt::join(shape, ", "), frames, shape[3] * layout.pixels_per_latent,
                                shape[4] * layout.pixels_per_latent, bytes / (1 << 30),
                                physical_memory_bytes() / (1 << 30)),
                    "decode fewer samples or latent frames at a time (slice the tensor)");
  TensorRole role = TensorRole::data();
  role.what = "latents to decode";
  role.hint = "decode the latents of a model of this family (`wanfw sample` writes them): finite floating-point values";
  return read_checked(file.tensor(kName), role, path, kName);
}

void prepare_decode_output(const fs::path& out) {
  if (out.extension() != ".safetensors") {
    writable_folder(out, out);
    return;
  }
  if (fs::is_directory(out))
    throw FileError(fmt::format("--out {}: is a folder, where the frames' safetensors file would go", out.string()),
                    "name a file to write, or a folder without the .safetensors ending for mp4 files");
  writable_folder(out.parent_path().empty() ? fs::path(".") : out.parent_path(), out);
  if (fs::exists(out) && ::access(out.c_str(), W_OK) != 0)
    throw FileError(fmt::format("--out {}: the file exists and is not writable", out.string()),
                    "choose an output where you may write");
}

}  // namespace wanfw
