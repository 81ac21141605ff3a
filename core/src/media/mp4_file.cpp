#include "media/mp4_file.hpp"

#include <unistd.h>

#include <memory>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"
#include "wanfw/file_io.hpp"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

namespace wanfw {

namespace {

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof(text));
  return text;
}

struct Muxer {
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* packet = nullptr;
  SwsContext* scaler = nullptr;
  ~Muxer() {
    sws_freeContext(scaler);
    av_packet_free(&packet);
    av_frame_free(&frame);
    avcodec_free_context(&codec);
    if (format != nullptr && format->pb != nullptr) avio_closep(&format->pb);
    avformat_free_context(format);
  }
};

/// Sends `frame` (null: the end) and writes every packet the encoder has ready.
void encode(Muxer& m, AVStream* stream, AVFrame* frame, const std::filesystem::path& path) {
  int code = avcodec_send_frame(m.codec, frame);
  if (code < 0) throw FileError(fmt::format("{}: encoding a frame failed: {}", path.string(), av_message(code)));
  while ((code = avcodec_receive_packet(m.codec, m.packet)) >= 0) {
    av_packet_rescale_ts(m.packet, m.codec->time_base, stream->time_base);
    m.packet->stream_index = stream->index;
    code = av_interleaved_write_frame(m.format, m.packet);
    if (code < 0) throw FileError(fmt::format("{}: writing a packet failed: {}", path.string(), av_message(code)),
                                  "check the free space of the disk");
  }
  if (code != AVERROR(EAGAIN) && code != AVERROR_EOF)
    throw FileError(fmt::format("{}: encoding failed: {}", path.string(), av_message(code)));
}

/// The first encoder this libavcodec has: H.264 through libx264, else MPEG-4 part 2.
const AVCodec* video_encoder() {
  if (const AVCodec* h264 = avcodec_find_encoder_by_name("libx264")) return h264;
  if (const AVCodec* mpeg4 = avcodec_find_encoder(AV_CODEC_ID_MPEG4)) return mpeg4;
  throw FileError("this FFmpeg (libavcodec) has neither an H.264 (libx264) nor an MPEG-4 part 2 encoder",
                  "install a libavcodec with libx264 or mpeg4 (Debian: libavcodec59)");
}

}  // namespace

Mp4Written write_mp4(const std::filesystem::path& path, const at::Tensor& frames, double fps) {
  if (frames.dim() != 4 || frames.size(3) != 3 || frames.scalar_type() != at::kByte || frames.size(0) < 1)
    throw Error(fmt::format("{}: frames must be [F, H, W, 3] uint8 with F >= 1, got {}", path.string(),
                            c10::str(frames.sizes())));
  if (!(fps > 0)) throw Error(fmt::format("{}: fps must be positive, got {}", path.string(), fps));
  // Even sizes for yuv420p: the last row / column repeated.
  at::Tensor rgb = frames.to(at::kCPU);
  if (rgb.size(1) % 2 != 0) rgb = torch::cat({rgb, rgb.narrow(1, rgb.size(1) - 1, 1)}, 1);
  if (rgb.size(2) % 2 != 0) rgb = torch::cat({rgb, rgb.narrow(2, rgb.size(2) - 1, 1)}, 2);
  rgb = rgb.contiguous();
  const int height = static_cast<int>(rgb.size(1)), width = static_cast<int>(rgb.size(2));
  const std::filesystem::path temp = path.string() + fmt::format(".tmp-{}.mp4", ::getpid());
  const std::string where = path.string();

  Muxer m;
  int code = avformat_alloc_output_context2(&m.format, nullptr, "mp4", temp.c_str());
  if (code < 0) throw FileError(fmt::format("{}: no mp4 muxer: {}", where, av_message(code)));
  const AVCodec* encoder = video_encoder();
  AVStream* stream = avformat_new_stream(m.format, nullptr);
  m.codec = avcodec_alloc_context3(encoder);
  m.frame = av_frame_alloc();
  m.packet = av_packet_alloc();
  if (stream == nullptr || m.codec == nullptr || m.frame == nullptr || m.packet == nullptr)
    throw FileError(fmt::format("{}: out of memory setting up the encoder", where));
  const AVRational rate = av_d2q(fps, 1 << 16);
  m.codec->width = width;
  m.codec->height = height;
  m.codec->pix_fmt = AV_PIX_FMT_YUV420P;
  m.codec->time_base = av_inv_q(rate);
  m.codec->framerate = rate;
  m.codec->gop_size = 12;
  // The colour matrix swscale converts with (BT.601) is what the stream says it is.
  m.codec->colorspace = AVCOL_SPC_SMPTE170M;
  m.codec->color_range = AVCOL_RANGE_MPEG;
  if (std::string(encoder->name) == "libx264") {
    av_opt_set(m.codec->priv_data, "crf", "18", 0);
    av_opt_set(m.codec->priv_data, "preset", "medium", 0);
  } else {
    m.codec->flags |= AV_CODEC_FLAG_QSCALE;
    m.codec->global_quality = FF_QP2LAMBDA * 2;
  }
  if ((m.format->oformat->flags & AVFMT_GLOBALHEADER) != 0) m.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if ((code = avcodec_open2(m.codec, encoder, nullptr)) < 0)
    throw FileError(fmt::format("{}: opening the {} encoder for {}x{} at {} fps failed: {}", where, encoder->name,
                                width, height, fps, av_message(code)));
  stream->time_base = m.codec->time_base;
  stream->avg_frame_rate = rate;
  avcodec_parameters_from_context(stream->codecpar, m.codec);
  if ((code = avio_open(&m.format->pb, temp.c_str(), AVIO_FLAG_WRITE)) < 0)
    throw FileError(fmt::format("{}: cannot create it: {}", where, av_message(code)),
                    "check that the folder exists and is writable");
  // From here on a failure leaves no temporary file behind.
  std::unique_ptr<const std::filesystem::path, void (*)(const std::filesystem::path*)> cleanup(
      &temp, [](const std::filesystem::path* p) {
        std::error_code ignored;
        std::filesystem::remove(*p, ignored);
      });
  if ((code = avformat_write_header(m.format, nullptr)) < 0)
    throw FileError(fmt::format("{}: writing the header failed: {}", where, av_message(code)));

  m.frame->format = AV_PIX_FMT_YUV420P;
  m.frame->width = width;
  m.frame->height = height;
  if (av_frame_get_buffer(m.frame, 0) < 0) throw FileError(fmt::format("{}: out of memory for a frame", where));
  m.scaler = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P,
                            SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr);
  if (m.scaler == nullptr) throw FileError(fmt::format("{}: no RGB to YUV 4:2:0 converter", where));
  const std::uint8_t* pixels = rgb.data_ptr<std::uint8_t>();
  const int stride = 3 * width;
  for (std::int64_t i = 0; i < rgb.size(0); ++i) {
    if (av_frame_make_writable(m.frame) < 0) throw FileError(fmt::format("{}: out of memory for a frame", where));
    const std::uint8_t* source[1] = {pixels + i * height * stride};
    sws_scale(m.scaler, source, &stride, 0, height, m.frame->data, m.frame->linesize);
    m.frame->pts = i;
    encode(m, stream, m.frame, path);
  }
  encode(m, stream, nullptr, path);
  if ((code = av_write_trailer(m.format)) < 0)
    throw FileError(fmt::format("{}: finishing the file failed: {}", where, av_message(code)),
                    "check the free space of the disk");
  if ((code = avio_closep(&m.format->pb)) < 0)
    throw FileError(fmt::format("{}: closing it failed: {}", where, av_message(code)), "check the free space of the disk");
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error) throw FileError(fmt::format("{}: renaming {} into place failed: {}", where, temp.string(), error.message()));
  sync_directory(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path());
  return Mp4Written{encoder->name, width, height, rgb.size(0)};
}

}  // namespace wanfw
