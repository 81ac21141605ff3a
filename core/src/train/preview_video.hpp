#pragma once
// Internal: previews as video. A preview sample decoded by the model family's decoder, shown to
// the loggers as a video (an animated GIF in TensorBoard) and a strip of frames, and written to
// the run folder as an mp4.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "reporting/logger_set.hpp"
#include "wanfw/decoder.hpp"

namespace wanfw {

/// Builds the run's decoder (the model plugin's make_decoder, from the model section) on the
/// training device; null when the model names none. Called at each preview, so the decoder's
/// weights take no memory between previews.
using DecoderFactory = std::function<std::shared_ptr<VideoDecoder>()>;

/// The widest frames the loggers get, so a dashboard loads the GIF fast; the mp4 keeps every pixel.
inline constexpr std::int64_t kLoggedVideoWidth = 320;
/// Frames side by side in the logged strip.
inline constexpr std::int64_t kStripFrames = 8;

/// Decodes `latents` (one sample, as Model::preview returns it), logs the video as
/// "preview/<name>" and its strip as "preview/<name>/frames", and writes <folder>/<name>.mp4 and
/// the latents as <folder>/<name>.safetensors.
/// Returns the seconds spent decoding.
double show_preview_video(std::int64_t step, const std::string& name, const at::Tensor& latents,
                          VideoDecoder& decoder, LoggerSet& loggers, const std::filesystem::path& folder);

}  // namespace wanfw
