#pragma once
// Internal: latents to pixels through the model plugin's decoder (`wanfw decode`,
// `wanfw sample --video`), written as mp4 files or as frames.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "config/config.hpp"
#include "plugin_host/plugin_host.hpp"
#include "run/run_request.hpp"
#include "wanfw/decoder.hpp"

namespace wanfw {

struct DecodeRequest {
  RunRequest run;                 ///< the config (an empty path: none) and its overrides
  std::filesystem::path latents;  ///< safetensors holding `latents`, as `wanfw sample` writes them
  std::filesystem::path out;      ///< FILE.safetensors: the frames; anything else: a folder of mp4s
  /// Without a config: the model plugin whose decoder decodes (default: the latents file's
  /// `model` metadata, which `wanfw sample` writes).
  std::string model;
  std::string device = "cpu";
};

/// Decodes the request's latents to video [B, 3, F, H, W] in [-1, 1]: to `out` as the tensor
/// `video` when it ends in .safetensors, else as <out>/sample-<i>.mp4. Builds no model.
void decode_experiment(const DecodeRequest& request);

/// The decoder of `config`'s model section on `device`; refuses when the section names none.
std::shared_ptr<VideoDecoder> required_decoder(const PluginHost& host, Config& config, const c10::Device& device,
                                               std::uint64_t seed);

/// `video` [B, 3, F, H, W] as mp4 files at `fps`: `path` itself for one sample, else
/// <stem>-<i>.mp4 beside it. Returns the files written.
std::vector<std::filesystem::path> write_videos(const at::Tensor& video, const std::filesystem::path& path,
                                                double fps);

}  // namespace wanfw
