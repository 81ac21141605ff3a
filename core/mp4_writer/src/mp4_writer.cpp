// The mp4 writer behind libwanfw_mp4_writer's one C function, wanfw_write_mp4_v3: RGB frames in,
// H.264 (libx264) or MPEG-4 part 2 out, through FFmpeg's libraries; FFmpeg's warnings and errors
// handed back to the caller (ffmpeg_messages.hpp), its statistics dropped.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "ffmpeg_messages.hpp"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

namespace {

/// A failure: what went wrong, and the hint for the user ("" for none).
struct Failure : std::runtime_error {
  std::string hint;
  Failure(const std::string& what, std::string h = "") : std::runtime_error(what), hint(std::move(h)) {}
};

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof(text));
  return text;
}

void check(int code, const std::string& what, const std::string& hint = "") {
  if (code < 0) throw Failure(what + ": " + av_message(code), hint);
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
void encode(Muxer& m, AVStream* stream, AVFrame* frame) {
  check(avcodec_send_frame(m.codec, frame), "encoding a frame failed");
  int code = 0;
  while ((code = avcodec_receive_packet(m.codec, m.packet)) >= 0) {
    av_packet_rescale_ts(m.packet, m.codec->time_base, stream->time_base);
    m.packet->stream_index = stream->index;
    check(av_interleaved_write_frame(m.format, m.packet), "writing a packet failed", "check the free space of the disk");
  }
  if (code != AVERROR(EAGAIN) && code != AVERROR_EOF) check(code, "encoding failed");
}

/// The first encoder this libavcodec has: H.264 through libx264, else MPEG-4 part 2.
const AVCodec* video_encoder() {
  if (const AVCodec* h264 = avcodec_find_encoder_by_name("libx264")) return h264;
  if (const AVCodec* mpeg4 = avcodec_find_encoder(AV_CODEC_ID_MPEG4)) return mpeg4;
  throw Failure("this FFmpeg (libavcodec) has neither an H.264 (libx264) nor an MPEG-4 part 2 encoder",
                "install a libavcodec with libx264 or mpeg4 (Debian: libavcodec59)");
}

/// One frame with its last row / column repeated up to even sizes (yuv420p halves chroma).
void even_frame(const std::uint8_t* rgb, int height, int width, int even_height, int even_width,
                std::vector<std::uint8_t>& out) {
  out.resize(static_cast<std::size_t>(even_height) * even_width * 3);
  for (int y = 0; y < even_height; ++y) {
    const std::uint8_t* row = rgb + static_cast<std::size_t>(std::min(y, height - 1)) * width * 3;
    std::uint8_t* dest = out.data() + static_cast<std::size_t>(y) * even_width * 3;
    std::memcpy(dest, row, static_cast<std::size_t>(width) * 3);
    if (even_width > width) std::memcpy(dest + width * 3, row + (width - 1) * 3, 3);
  }
}

/// The size yuv420p can store: an odd one grows by a repeated last row or column.
int even(int size) { return size + size % 2; }

void write(const char* path, const std::uint8_t* rgb, std::int64_t frames, int height, int width, double fps,
           std::string& encoder_name) {
  const int even_height = even(height), even_width = even(width);
  const std::string temp = std::string(path) + ".tmp-" + std::to_string(::getpid()) + ".mp4";
  Muxer m;
  check(avformat_alloc_output_context2(&m.format, nullptr, "mp4", temp.c_str()), "no mp4 muxer");
  const AVCodec* encoder = video_encoder();
  encoder_name = encoder->name;
  AVStream* stream = avformat_new_stream(m.format, nullptr);
  m.codec = avcodec_alloc_context3(encoder);
  m.frame = av_frame_alloc();
  m.packet = av_packet_alloc();
  if (stream == nullptr || m.codec == nullptr || m.frame == nullptr || m.packet == nullptr)
    throw Failure("out of memory setting up the encoder");
  const AVRational rate = av_d2q(fps, 1 << 16);
  m.codec->width = even_width;
  m.codec->height = even_height;
  m.codec->pix_fmt = AV_PIX_FMT_YUV420P;
  m.codec->time_base = av_inv_q(rate);
  m.codec->framerate = rate;
  m.codec->gop_size = 12;
  // The colour matrix swscale converts with (BT.601, limited range) is what the stream says it is.
  m.codec->colorspace = AVCOL_SPC_SMPTE170M;
  m.codec->color_range = AVCOL_RANGE_MPEG;
  if (encoder_name == "libx264") {
    av_opt_set(m.codec->priv_data, "crf", "18", 0);
    av_opt_set(m.codec->priv_data, "preset", "medium", 0);
  } else {
    m.codec->flags |= AV_CODEC_FLAG_QSCALE;
    m.codec->global_quality = FF_QP2LAMBDA * 2;
  }
  if ((m.format->oformat->flags & AVFMT_GLOBALHEADER) != 0) m.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  check(avcodec_open2(m.codec, encoder, nullptr), "opening the " + encoder_name + " encoder failed");
  stream->time_base = m.codec->time_base;
  stream->avg_frame_rate = rate;
  avcodec_parameters_from_context(stream->codecpar, m.codec);
  check(avio_open(&m.format->pb, temp.c_str(), AVIO_FLAG_WRITE), "cannot create it",
        "check that the folder exists and is writable");
  struct RemoveTemp {  // a failure leaves no temporary file behind
    const std::string& name;
    ~RemoveTemp() { std::remove(name.c_str()); }
  } remove_temp{temp};
  check(avformat_write_header(m.format, nullptr), "writing the header failed");

  m.frame->format = AV_PIX_FMT_YUV420P;
  m.frame->width = even_width;
  m.frame->height = even_height;
  check(av_frame_get_buffer(m.frame, 0), "out of memory for a frame");
  m.scaler = sws_getContext(even_width, even_height, AV_PIX_FMT_RGB24, even_width, even_height, AV_PIX_FMT_YUV420P,
                            SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr);
  if (m.scaler == nullptr) throw Failure("no RGB to YUV 4:2:0 converter");
  std::vector<std::uint8_t> padded;
  const int stride = 3 * even_width;
  for (std::int64_t i = 0; i < frames; ++i) {
    check(av_frame_make_writable(m.frame), "out of memory for a frame");
    const std::uint8_t* frame = rgb + static_cast<std::size_t>(i) * height * width * 3;
    if (even_height != height || even_width != width) {
      even_frame(frame, height, width, even_height, even_width, padded);
      frame = padded.data();
    }
    const std::uint8_t* source[1] = {frame};
    sws_scale(m.scaler, source, &stride, 0, even_height, m.frame->data, m.frame->linesize);
    m.frame->pts = i;
    encode(m, stream, m.frame);
  }
  encode(m, stream, nullptr);
  check(av_write_trailer(m.format), "finishing the file failed", "check the free space of the disk");
  check(avio_closep(&m.format->pb), "closing it failed", "check the free space of the disk");
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error) throw Failure("renaming " + temp + " into place failed: " + error.message());
}

void copy_out(const std::string& text, char* out, std::size_t size) {
  if (out == nullptr || size == 0) return;
  std::snprintf(out, size, "%s", text.c_str());
}

}  // namespace

/// Writes `frames` RGB frames (height x width x 3 bytes each, back to back) to `path` as an mp4
/// playing at `fps`. Returns 0, the encoder's name in `encoder` and the size the stream stores
/// (odd sizes grow by one: yuv420p halves chroma) in `stored_height` x `stored_width`; or 1 with
/// what failed in `error` and what to do in `hint`. Either way `warnings` holds FFmpeg's warnings
/// and errors while it wrote, each once, one a line ("" for none).
extern "C" __attribute__((visibility("default"))) int wanfw_write_mp4_v3(
    const char* path, const std::uint8_t* rgb, std::int64_t frames, int height, int width, double fps, char* encoder,
    std::size_t encoder_size, int* stored_height, int* stored_width, char* error, std::size_t error_size, char* hint,
    std::size_t hint_size, char* warnings, std::size_t warnings_size) {
  const wanfw_mp4::FfmpegMessages messages;
  struct Report {  // the messages reach the caller whatever happens below
    const wanfw_mp4::FfmpegMessages& messages;
    char* out;
    std::size_t size;
    ~Report() { copy_out(messages.text(), out, size); }
  } report{messages, warnings, warnings_size};
  try {
    std::string name;
    write(path, rgb, frames, height, width, fps, name);
    copy_out(name, encoder, encoder_size);
    *stored_height = even(height);
    *stored_width = even(width);
    return 0;
  } catch (const Failure& failure) {
    copy_out(failure.what(), error, error_size);
    copy_out(failure.hint, hint, hint_size);
  } catch (const std::exception& e) {
    copy_out(e.what(), error, error_size);
    copy_out("", hint, hint_size);
  }
  return 1;
}
