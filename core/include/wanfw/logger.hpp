#pragma once
// The logger plugin interface.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// Where a logger writes and whether the run continues an earlier one.
struct LoggerContext {
  std::filesystem::path run_dir;
  /// The step training resumes from (0 for a fresh run). Loggers drop anything they recorded
  /// beyond it, so a resumed run shows one history without duplicated steps.
  std::int64_t resume_step = 0;
};

/// Receives what a run reports. Only the main process calls a logger. Scalars are required;
/// the other kinds are optional (the defaults ignore them).
class Logger {
 public:
  virtual ~Logger() = default;
  virtual void open(const LoggerContext& context) = 0;
  virtual void log_scalars(std::int64_t step, const std::map<std::string, double>& scalars) = 0;
  virtual void log_text(std::int64_t step, const std::string& tag, const std::string& text) {}
  /// The run's hyper-parameters (the resolved config flattened to "section.key" -> value) at
  /// the start of a run.
  virtual void log_hparams(const std::map<std::string, std::string>& hparams) {}
  /// An image: [H, W, C] uint8 with C = 1 (grey), 3 (RGB) or 4 (RGBA), on the CPU.
  virtual void log_image(std::int64_t step, const std::string& tag, const at::Tensor& image) {}
  /// A short video: frames [F, H, W, 3] uint8 RGB on the CPU, played at `fps` (previews of what
  /// the model generates; the tensorboard logger writes an animated GIF image).
  virtual void log_video(std::int64_t step, const std::string& tag, const at::Tensor& frames, double fps) {}
  /// The distribution of a tensor's values (weights, gradients), on the CPU.
  virtual void log_histogram(std::int64_t step, const std::string& tag, const at::Tensor& values) {}
  virtual void flush() {}
  virtual void close() { flush(); }
};

}  // namespace wanfw
