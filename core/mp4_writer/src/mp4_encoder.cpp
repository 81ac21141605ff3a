// The mp4 encoder (mp4_encoder.hpp) on FFmpeg's libraries.
#include "mp4_encoder.hpp"

#include <algorithm>
#include <cstring>

extern "C" {
#include <libavutil/opt.h>
}

namespace wanfw_mp4 {

namespace {

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof(text));
  return text;
}

void check(int code, const std::string& what, const std::string& hint = "") {
  if (code < 0) throw Failure(what + ": " + av_message(code), hint);
}

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

}  // namespace

Muxer::~Muxer() {
  sws_freeContext(scaler);
  av_packet_free(&packet);
  av_frame_free(&frame);
  avcodec_free_context(&codec);
  if (format != nullptr && format->pb != nullptr) avio_closep(&format->pb);
  avformat_free_context(format);
}

Encoder::Encoder(const std::string& file, int height, int width, double fps, bool fragmented)
    : height_(height), width_(width), even_height_(even(height)), even_width_(even(width)) {
  check(avformat_alloc_output_context2(&m_.format, nullptr, "mp4", file.c_str()), "no mp4 muxer");
  const AVCodec* encoder = video_encoder();
  name_ = encoder->name;
  stream_ = avformat_new_stream(m_.format, nullptr);
  m_.codec = avcodec_alloc_context3(encoder);
  m_.frame = av_frame_alloc();
  m_.packet = av_packet_alloc();
  if (stream_ == nullptr || m_.codec == nullptr || m_.frame == nullptr || m_.packet == nullptr)
    throw Failure("out of memory setting up the encoder");
  const AVRational rate = av_d2q(fps, 1 << 16);
  m_.codec->width = even_width_;
  m_.codec->height = even_height_;
  m_.codec->pix_fmt = AV_PIX_FMT_YUV420P;
  m_.codec->time_base = av_inv_q(rate);
  m_.codec->framerate = rate;
  m_.codec->gop_size = 12;
  // The colour matrix swscale converts with (BT.601, limited range) is what the stream says it is.
  m_.codec->colorspace = AVCOL_SPC_SMPTE170M;
  m_.codec->color_range = AVCOL_RANGE_MPEG;
  if (name_ == "libx264") {
    av_opt_set(m_.codec->priv_data, "crf", "18", 0);
    av_opt_set(m_.codec->priv_data, "preset", "medium", 0);
  } else {
    m_.codec->flags |= AV_CODEC_FLAG_QSCALE;
    m_.codec->global_quality = FF_QP2LAMBDA * 2;
  }
  if ((m_.format->oformat->flags & AVFMT_GLOBALHEADER) != 0) m_.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  check(avcodec_open2(m_.codec, encoder, nullptr), "opening the " + name_ + " encoder failed");
  stream_->time_base = m_.codec->time_base;
  stream_->avg_frame_rate = rate;
  avcodec_parameters_from_context(stream_->codecpar, m_.codec);
  check(avio_open(&m_.format->pb, file.c_str(), AVIO_FLAG_WRITE), "cannot create it",
        "check that the folder exists and is writable");
  AVDictionary* options = nullptr;
  if (fragmented) av_dict_set(&options, "movflags", "frag_keyframe+empty_moov+default_base_moof", 0);
  const int written = avformat_write_header(m_.format, &options);
  av_dict_free(&options);
  check(written, "writing the header failed");
  m_.frame->format = AV_PIX_FMT_YUV420P;
  m_.frame->width = even_width_;
  m_.frame->height = even_height_;
  check(av_frame_get_buffer(m_.frame, 0), "out of memory for a frame");
  m_.scaler = sws_getContext(even_width_, even_height_, AV_PIX_FMT_RGB24, even_width_, even_height_,
                             AV_PIX_FMT_YUV420P, SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr);
  if (m_.scaler == nullptr) throw Failure("no RGB to YUV 4:2:0 converter");
}

void Encoder::append(const std::uint8_t* rgb, std::int64_t frames) {
  const int stride = 3 * even_width_;
  for (std::int64_t i = 0; i < frames; ++i) {
    check(av_frame_make_writable(m_.frame), "out of memory for a frame");
    const std::uint8_t* frame = rgb + static_cast<std::size_t>(i) * height_ * width_ * 3;
    if (even_height_ != height_ || even_width_ != width_) {
      even_frame(frame, height_, width_, even_height_, even_width_, padded_);
      frame = padded_.data();
    }
    const std::uint8_t* source[1] = {frame};
    sws_scale(m_.scaler, source, &stride, 0, even_height_, m_.frame->data, m_.frame->linesize);
    m_.frame->pts = next_pts_++;
    encode(m_, stream_, m_.frame);
  }
  avio_flush(m_.format->pb);  // what the encoder let go reaches the file now
}

void Encoder::finish() {
  encode(m_, stream_, nullptr);
  check(av_write_trailer(m_.format), "finishing the file failed", "check the free space of the disk");
  check(avio_closep(&m_.format->pb), "closing it failed", "check the free space of the disk");
}

}  // namespace wanfw_mp4
