// Logger `tensorboard`: TensorBoard event files in the run folder, one new file per process start.
// Scalars, histograms, images (PNG), videos (animated GIF), text (the resolved config) and the
// hparams plugin's session info; on resume, a SessionLog START at the resume step makes
// TensorBoard drop what the earlier process logged beyond it.

#include <optional>

#include <fmt/format.h>
#include <torch/torch.h>

#include "event_file.hpp"
#include "events.hpp"
#include "gif.hpp"
#include "png.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"
#include "wanfw/plugin.hpp"

namespace {

using wanfw::option;
using namespace wanfw::tb;
using T = wanfw::OptionType;

class TensorBoardLogger final : public wanfw::Logger {
 public:
  TensorBoardLogger(int flush_every, double flush_seconds) : flush_every_(flush_every), flush_seconds_(flush_seconds) {}

  void open(const wanfw::LoggerContext& context) override {
    file_.emplace(context.run_dir, flush_every_, flush_seconds_);
    // TensorBoard drops the events at and beyond a SessionLog START's step: what the earlier process
    // logged after the checkpoint this run resumes from. The first step logged again is resume + 1.
    if (context.resume_step > 0) file_->write(session_start_event(wall_time_now(), context.resume_step + 1));
    file_->flush();
    wanfw::log::debug(fmt::format("tensorboard: writing {}", file_->path().string()));
  }

  void log_scalars(std::int64_t step, const std::map<std::string, double>& scalars) override {
    file().write(scalars_event(wall_time_now(), step, scalars));
  }

  void log_text(std::int64_t step, const std::string& tag, const std::string& text) override {
    file().write(text_event(wall_time_now(), step, tag, text));
  }

  void log_hparams(const std::map<std::string, std::string>& hparams) override {
    file().write(hparams_start_event(wall_time_now(), hparams));
    wrote_hparams_ = true;
  }

  void log_video(std::int64_t step, const std::string& tag, const at::Tensor& frames, double fps) override {
    const at::Tensor pixels = frames.to(at::kCPU).contiguous();
    if (pixels.dim() != 4 || pixels.scalar_type() != at::kByte || pixels.size(3) != 3)
      throw wanfw::Error(fmt::format("tensorboard: video '{}' has shape {} and dtype {}; expected [F, H, W, 3] uint8",
                                     tag, c10::str(pixels.sizes()), c10::toString(pixels.scalar_type())));
    const int count = static_cast<int>(pixels.size(0)), height = static_cast<int>(pixels.size(1)),
              width = static_cast<int>(pixels.size(2));
    file().write(image_event(wall_time_now(), step, tag, height, width, 3,
                             encode_gif(pixels.data_ptr<std::uint8_t>(), count, height, width, fps)));
  }

  void log_image(std::int64_t step, const std::string& tag, const at::Tensor& image) override {
    const at::Tensor pixels = image.to(at::kCPU).contiguous();
    if (pixels.dim() != 3 || pixels.scalar_type() != at::kByte || pixels.size(2) < 1 || pixels.size(2) > 4)
      throw wanfw::Error(
          fmt::format("tensorboard: image '{}' has shape {} and dtype {}; expected [H, W, C] uint8 "
                      "with C in 1..4",
                      tag, c10::str(pixels.sizes()), c10::toString(pixels.scalar_type())));
    const int height = static_cast<int>(pixels.size(0)), width = static_cast<int>(pixels.size(1)),
              channels = static_cast<int>(pixels.size(2));
    file().write(image_event(wall_time_now(), step, tag, height, width, channels,
                             encode_png(pixels.data_ptr<std::uint8_t>(), height, width, channels)));
  }

  void log_histogram(std::int64_t step, const std::string& tag, const at::Tensor& values) override {
    const at::Tensor flat = values.detach().to(at::kCPU, at::kDouble).flatten().contiguous();
    const double* data = flat.data_ptr<double>();
    file().write(histogram_event(wall_time_now(), step, tag, std::vector<double>(data, data + flat.numel())));
  }

  void flush() override {
    if (file_) file_->flush();
  }

  void close() override {
    if (!file_) return;
    if (wrote_hparams_) file_->write(hparams_end_event(wall_time_now(), /*success=*/true));
    file_->flush();
    file_.reset();
  }

 private:
  EventFile& file() {
    if (!file_) throw wanfw::Error("tensorboard: the logger was used before open()");
    return *file_;
  }

  int flush_every_;
  double flush_seconds_;
  std::optional<EventFile> file_;
  bool wrote_hparams_ = false;
};

std::unique_ptr<wanfw::Logger> make_logger(const wanfw::Options& o, const wanfw::PluginContext&) {
  if (o.integer("flush_every") < 1) o.fail("flush_every", "must be at least 1");
  if (!(o.number("flush_secs") > 0)) o.fail("flush_secs", "must be positive");
  return std::make_unique<TensorBoardLogger>(static_cast<int>(o.integer("flush_every")), o.number("flush_secs"));
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_logger(
      "tensorboard", "0.1.0",
      "TensorBoard event files in the run folder: scalars, histograms, images, videos (GIF), the config as text, "
      "hparams.");
  d.options = {
      option("flush_every", T::Integer).value("20").doc("Write buffered events to the file after this many."),
      option("flush_secs", T::Number)
          .value("10")
          .doc("... or when this many seconds have passed since the last write."),
  };
  d.make_logger = make_logger;
  return d;
}

}  // namespace

WANFW_PLUGIN(Logger, describe)
