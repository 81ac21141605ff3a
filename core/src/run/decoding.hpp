#pragma once
// Internal: latents to pixels through the model plugin's decoder (`wanfw decode`,
// `wanfw sample --video`), written as mp4 files or as frames.

#include <cstdint>
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

/// write_videos as the latents come (`wanfw sample --video` with a streaming model): each chunk of
/// latents [B, C, t, h, w] decoded by the decoder's stream and its frames appended to each sample's
/// mp4 (named as write_videos names them), which players read while it grows.
class StreamedVideos {
 public:
  StreamedVideos(std::unique_ptr<VideoStream> stream, std::filesystem::path path, double fps);
  ~StreamedVideos();
  /// The next chunk of every sample's latents.
  void add(const at::Tensor& latents);
  /// Ends every file; returns them.
  std::vector<std::filesystem::path> finish();

 private:
  std::unique_ptr<VideoStream> stream_;
  std::filesystem::path path_;
  double fps_;
  std::vector<std::unique_ptr<class Mp4Stream>> files_;
  std::int64_t frames_ = 0;
};

}  // namespace wanfw
