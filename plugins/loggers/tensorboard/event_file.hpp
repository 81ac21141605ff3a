#pragma once
// TensorBoard event files without libprotobuf: a small encoder for the few messages a training
// run writes (Event, Summary, HistogramProto, Image, TensorProto, the hparams plugin's data),
// TFRecord framing with masked CRC32C, and a PNG encoder for images. Field numbers follow
// TensorBoard's .proto files (event.proto, summary.proto, histogram.proto, tensor.proto,
// plugins/hparams/plugin_data.proto).

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace wanfw::tb {

/// Protocol-buffer wire encoding of one message, field by field.
class Proto {
 public:
  Proto& varint(int field, std::uint64_t value);
  Proto& fixed64_double(int field, double value);
  Proto& fixed32_float(int field, float value);
  Proto& bytes(int field, std::string_view value);
  Proto& message(int field, const Proto& value) { return bytes(field, value.data_); }
  Proto& packed_doubles(int field, const std::vector<double>& values);
  const std::string& data() const { return data_; }

 private:
  void key(int field, int wire_type);
  void raw_varint(std::uint64_t value);
  std::string data_;
};

/// CRC32C (Castagnoli) of `data`, and TFRecord's masked form of it.
std::uint32_t crc32c(std::string_view data);
std::uint32_t masked_crc32c(std::string_view data);
/// One TFRecord: u64 length (little endian), masked CRC of the length, payload, masked CRC.
std::string tf_record(std::string_view payload);

/// Events (serialised Event messages).
std::string file_version_event(double wall_time);
std::string session_start_event(double wall_time, std::int64_t step);
std::string scalars_event(double wall_time, std::int64_t step, const std::map<std::string, double>& scalars);
std::string histogram_event(double wall_time, std::int64_t step, const std::string& tag, const std::vector<double>& values);
std::string image_event(double wall_time, std::int64_t step, const std::string& tag, int height, int width,
                        int channels, const std::string& png);
std::string text_event(double wall_time, std::int64_t step, const std::string& tag, const std::string& text);
/// The hparams plugin's session_start_info: numbers, booleans ("true"/"false") and strings.
std::string hparams_start_event(double wall_time, const std::map<std::string, std::string>& hparams);
std::string hparams_end_event(double wall_time, bool success);

/// PNG of 8-bit pixels, rows top to bottom, `channels` interleaved (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA).
std::string encode_png(const std::uint8_t* pixels, int height, int width, int channels);

/// Seconds since the epoch, with sub-second resolution.
double wall_time_now();

/// One event file of one process: events.out.tfevents.<seconds>.<host>.<pid>.wanfw in `folder`,
/// starting with the file_version event. Records are buffered and written whole, every
/// `flush_every` events or `flush_seconds`, and on flush(); a killed process leaves a file that
/// ends on a record boundary of an earlier flush.
class EventFile {
 public:
  EventFile(const std::filesystem::path& folder, int flush_every, double flush_seconds);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  void write(const std::string& event);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::string pending_;
  int pending_events_ = 0;
  int flush_every_;
  double flush_seconds_;
  std::chrono::steady_clock::time_point last_flush_;
};

}  // namespace wanfw::tb
