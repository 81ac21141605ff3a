#include "train/preview_video.hpp"

#include <chrono>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "media/mp4_file.hpp"
#include "media/video_frames.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace wanfw {

double show_preview_video(std::int64_t step, const std::string& name, const at::Tensor& latents,
                          VideoDecoder& decoder, LoggerSet& loggers, const std::filesystem::path& folder) {
  const auto started = std::chrono::steady_clock::now();
  const at::Tensor video = decoder.decode(latents);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (video.dim() != 5 || video.size(0) != 1)
    throw Error(fmt::format("the decoder ({}) returned {} for one preview sample; expected [1, 3, F, H, W]",
                            decoder.describe(), c10::str(video.sizes())));
  const at::Tensor frames = video_frames(video[0]);
  std::filesystem::create_directories(folder);
  if (mp4_writer_available()) {
    write_mp4(folder / (name + ".mp4"), frames, decoder.fps());
  } else {
    static std::once_flag warned;
    std::call_once(warned, [] {
      spdlog::warn("this wanfw was built without its mp4 writer (-DWANFW_MP4_WRITER=OFF): previews go to the "
                   "loggers and their latents to the run folder, with no mp4");
    });
  }
  // The latents too, for `wanfw decode` (another VAE, another dtype) or the user's own tools.
  write_safetensors(folder / (name + ".safetensors"), {{"latents", latents.detach().cpu().contiguous()}},
                    {{"written_by", "wanfw preview"}});
  const at::Tensor small = fit_width(frames, kLoggedVideoWidth);
  loggers.video(step, "preview/" + name, small, decoder.fps());
  loggers.image(step, "preview/" + name + "/frames", frame_strip(small, kStripFrames));
  return seconds;
}

}  // namespace wanfw
