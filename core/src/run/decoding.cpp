#include "run/decoding.hpp"

#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include "config/core_sections.hpp"
#include "host/console.hpp"
#include "memory/peak_memory.hpp"
#include "media/mp4_file.hpp"
#include "media/video_frames.hpp"
#include "media/decode_inputs.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

c10::Device parse_device(const std::string& name) {
  if (name == "auto")  // as predict and sample take it: the first GPU, else the CPU
    return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  try {
    return c10::Device(name);
  } catch (const std::exception&) {
    throw ConfigError(SourceLocation{"command line", 0, 0}, fmt::format("--device '{}' is not a device", name),
                      "use cpu, cuda or cuda:N");
  }
}

/// The config of the request, or (none given) a model section naming the plugin.
Config decode_config(const DecodeRequest& request, const std::map<std::string, std::string>& metadata) {
  if (!request.run.config.empty()) return Config::load(request.run.config, request.run.overrides);
  std::string model = request.model;
  if (model.empty()) {
    const auto named = metadata.find("model");
    if (named == metadata.end())
      throw ConfigError(SourceLocation{"command line", 0, 0},
                        fmt::format("{} does not say which model wrote it", request.latents.string()),
                        "pass --model NAME (the model plugin, e.g. wan22_flow_matching) or a CONFIG");
    model = named->second;
  }
  return Config::parse(fmt::format("model:\n  name: {}\n", model), "wanfw decode", request.run.overrides);
}

}  // namespace

std::shared_ptr<VideoDecoder> required_decoder(const PluginHost& host, Config& config, const c10::Device& device,
                                               std::uint64_t seed) {
  if (!config.has("model"))
    throw ConfigError(config.where("model"), "the config has no 'model' section",
                      "decode with the config the latents were sampled with");
  PluginContext context;
  context.seed = seed;
  context.device = context.train_device = device;
  std::shared_ptr<VideoDecoder> decoder = host.make_decoder(config, "model", context);
  if (!decoder)
    throw PluginError(fmt::format("the model plugin '{}' built no decoder from the model section",
                                  config.string_at("model.name")),
                      "name the decoder in the model section (the Wan models: model.vae) or pass --vae PATH");
  spdlog::info("{}", decoder->describe());
  return decoder;
}

namespace {

/// Sample `i`'s file of `count`: `path` itself for one, else <stem>-<i>.mp4 beside it.
fs::path video_file(const fs::path& path, std::int64_t i, std::int64_t count) {
  if (count == 1) return path;
  return path.parent_path() /
         fmt::format("{}-{}{}", path.stem().string(), i, path.has_extension() ? path.extension().string() : ".mp4");
}

}  // namespace

std::vector<fs::path> write_videos(const at::Tensor& video, const fs::path& path, double fps) {
  std::vector<fs::path> written;
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  for (std::int64_t i = 0; i < video.size(0); ++i) {
    const fs::path file = video_file(path, i, video.size(0));
    const Mp4Written mp4 = write_mp4(file, video_frames(video[i]), fps);
    spdlog::info("wrote {} ({} frames of {}x{}, {}, {} fps)", file.string(), mp4.frames, mp4.width, mp4.height,
                 mp4.encoder, fps);
    written.push_back(file);
  }
  return written;
}

StreamedVideos::StreamedVideos(std::unique_ptr<VideoStream> stream, fs::path path, double fps)
    : stream_(std::move(stream)), path_(std::move(path)), fps_(fps) {
  if (!path_.parent_path().empty()) fs::create_directories(path_.parent_path());
}

StreamedVideos::~StreamedVideos() = default;

void StreamedVideos::add(const at::Tensor& latents) {
  const at::Tensor video = stream_->next(latents);  // [B, 3, f, H, W]
  if (files_.empty())
    for (std::int64_t i = 0; i < video.size(0); ++i)
      files_.push_back(std::make_unique<Mp4Stream>(video_file(path_, i, video.size(0)), fps_));
  for (std::int64_t i = 0; i < video.size(0); ++i) files_[static_cast<std::size_t>(i)]->append(video_frames(video[i]));
  spdlog::info("streamed frames {}-{} to {}{}", frames_, frames_ + video.size(2) - 1, files_.front()->path().string(),
               files_.size() > 1 ? fmt::format(" and {} more", files_.size() - 1) : "");
  frames_ += video.size(2);
}

std::vector<fs::path> StreamedVideos::finish() {
  std::vector<fs::path> written;
  for (auto& file : files_) {
    const Mp4Written mp4 = file->finish();
    spdlog::info("wrote {} ({} frames of {}x{}, {}, {} fps)", file->path().string(), mp4.frames, mp4.width,
                 mp4.height, mp4.encoder, fps_);
    written.push_back(file->path());
  }
  files_.clear();
  return written;
}

void decode_experiment(const DecodeRequest& request) {
  const SafetensorsFile file = SafetensorsFile::open(request.latents);
  Config config = decode_config(request, file.metadata());
  const CoreSettings settings = CoreSettings::from(config);
  configure_console(settings.run.log_level, 0);
  const PluginHost host(PluginHost::search_path(settings.plugin_path));
  const c10::Device device = parse_device(request.device);
  const std::shared_ptr<VideoDecoder> decoder = required_decoder(host, config, device, settings.run.seed);
  // Every input and the output's place are checked before the decoding: a refused run writes nothing.
  const at::Tensor latents = read_latents(file, request.latents, decoder->latent_layout());
  prepare_decode_output(request.out);
  const double weights_mib = gpu_memory_mib(device);
  reset_gpu_peaks(device);
  const auto started = std::chrono::steady_clock::now();
  const at::Tensor video = decoder->decode(latents);  // on the CPU: the device is done with it
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("decoded {} sample(s) of {} latent frames to {} frames of {}x{} in {:.2f} s", video.size(0),
               latents.size(2), video.size(2), video.size(3), video.size(4), seconds);
  if (device.is_cuda()) {
    const double peak_mib = peak_gpu_memory_mib(device);
    spdlog::info("GPU memory: the decoder holds {:.0f} MiB; decoding peaked at {:.0f} MiB, {:.0f} MiB above it",
                 weights_mib, peak_mib, peak_mib - weights_mib);
  }
  if (request.out.extension() == ".safetensors") {
    write_safetensors(request.out, {{"video", video}}, {{"written_by", "wanfw decode"}});
    spdlog::info("wrote the frames to {}", request.out.string());
    return;
  }
  for (std::int64_t i = 0; i < video.size(0); ++i)
    write_videos(video.narrow(0, i, 1), request.out / fmt::format("sample-{}.mp4", i), decoder->fps());
}

}  // namespace wanfw
