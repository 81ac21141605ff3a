#include "event_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include <boost/crc.hpp>
#include <fmt/format.h>
#include <zlib.h>

#include "wanfw/error.hpp"

namespace wanfw::tb {

// --- protobuf wire format ----------------------------------------------------------------------

void Proto::raw_varint(std::uint64_t value) {
  while (value >= 0x80) {
    data_ += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  data_ += static_cast<char>(value);
}

void Proto::key(int field, int wire_type) { raw_varint((static_cast<std::uint64_t>(field) << 3) | wire_type); }

Proto& Proto::varint(int field, std::uint64_t value) {
  key(field, 0);
  raw_varint(value);
  return *this;
}

namespace {
template <typename T>
void append_little_endian(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little endian
  out.append(bytes, sizeof(T));
}
}  // namespace

Proto& Proto::fixed64_double(int field, double value) {
  key(field, 1);
  append_little_endian(data_, value);
  return *this;
}

Proto& Proto::fixed32_float(int field, float value) {
  key(field, 5);
  append_little_endian(data_, value);
  return *this;
}

Proto& Proto::bytes(int field, std::string_view value) {
  key(field, 2);
  raw_varint(value.size());
  data_.append(value.data(), value.size());
  return *this;
}

Proto& Proto::packed_doubles(int field, const std::vector<double>& values) {
  key(field, 2);
  raw_varint(values.size() * sizeof(double));
  for (double v : values) append_little_endian(data_, v);
  return *this;
}

// --- TFRecord ---------------------------------------------------------------------------------

std::uint32_t crc32c(std::string_view data) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tf_record(std::string_view payload) {
  std::string record;
  append_little_endian(record, static_cast<std::uint64_t>(payload.size()));
  append_little_endian(record, masked_crc32c(record));
  record.append(payload.data(), payload.size());
  append_little_endian(record, masked_crc32c(payload));
  return record;
}

// --- events -----------------------------------------------------------------------------------

namespace {

// Event fields.
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
// Summary.Value fields.
constexpr int kTag = 1, kSimpleValue = 2, kImage = 4, kHisto = 5, kTensor = 8, kMetadata = 9;

Proto event(double wall_time, std::int64_t step) {
  Proto e;
  e.fixed64_double(kWallTime, wall_time);
  if (step != 0) e.varint(kStep, static_cast<std::uint64_t>(step));
  return e;
}

std::string summary_event(double wall_time, std::int64_t step, const std::vector<Proto>& values) {
  Proto summary;
  for (const auto& v : values) summary.message(1, v);
  return event(wall_time, step).message(kSummary, summary).data();
}

Proto plugin_metadata(const std::string& plugin, const Proto& content) {
  return Proto().message(1, Proto().bytes(1, plugin).bytes(2, content.data()));
}

}  // namespace

std::string file_version_event(double wall_time) {
  return event(wall_time, 0).bytes(kFileVersion, "brain.Event:2").data();
}

std::string session_start_event(double wall_time, std::int64_t step) {
  return event(wall_time, step).message(kSessionLog, Proto().varint(1, 1)).data();  // status START
}

std::string scalars_event(double wall_time, std::int64_t step, const std::map<std::string, double>& scalars) {
  std::vector<Proto> values;
  for (const auto& [tag, value] : scalars)
    values.push_back(Proto().bytes(kTag, tag).fixed32_float(kSimpleValue, static_cast<float>(value)));
  return summary_event(wall_time, step, values);
}

std::string histogram_event(double wall_time, std::int64_t step, const std::string& tag,
                            const std::vector<double>& values) {
  // Equal-width buckets over [min, max]; bucket i covers (limit[i-1], limit[i]].
  constexpr int kBuckets = 30;
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_squares = 0;
  std::size_t finite = 0;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_squares += v * v;
    ++finite;
  }
  std::vector<double> limits, counts;
  if (finite == 0) {
    lo = hi = 0;
  } else if (hi == lo) {
    limits = {hi};
    counts = {static_cast<double>(finite)};
  } else {
    const double width = (hi - lo) / kBuckets;
    for (int i = 1; i <= kBuckets; ++i) limits.push_back(i == kBuckets ? hi : lo + width * i);
    counts.assign(kBuckets, 0.0);
    for (double v : values)
      if (std::isfinite(v)) counts[std::min<std::size_t>(kBuckets - 1, static_cast<std::size_t>((v - lo) / width))] += 1;
  }
  Proto histo;
  histo.fixed64_double(1, lo).fixed64_double(2, hi).fixed64_double(3, static_cast<double>(finite));
  histo.fixed64_double(4, sum).fixed64_double(5, sum_squares);
  histo.packed_doubles(6, limits).packed_doubles(7, counts);
  return summary_event(wall_time, step, {Proto().bytes(kTag, tag).message(kHisto, histo)});
}

std::string image_event(double wall_time, std::int64_t step, const std::string& tag, int height, int width,
                        int channels, const std::string& png) {
  Proto image;
  image.varint(1, static_cast<std::uint64_t>(height)).varint(2, static_cast<std::uint64_t>(width));
  image.varint(3, static_cast<std::uint64_t>(channels)).bytes(4, png);
  return summary_event(wall_time, step, {Proto().bytes(kTag, tag).message(kImage, image)});
}

std::string text_event(double wall_time, std::int64_t step, const std::string& tag, const std::string& text) {
  // plugin "text": a DT_STRING tensor of shape [1].
  Proto tensor;
  tensor.varint(1, 7).message(2, Proto().message(2, Proto().varint(1, 1))).bytes(8, text);
  Proto value;
  value.bytes(kTag, tag + "/text_summary").message(kMetadata, plugin_metadata("text", Proto())).message(kTensor, tensor);
  return summary_event(wall_time, step, {value});
}

namespace {
/// A Summary.Value of the hparams plugin, with the null tensor TensorBoard expects.
std::string hparams_event(double wall_time, const std::string& tag, const Proto& plugin_data) {
  const Proto null_tensor = Proto().varint(1, 1).message(2, Proto().message(2, Proto().varint(1, 0)));
  Proto value;
  value.bytes(kTag, tag).message(kMetadata, plugin_metadata("hparams", plugin_data)).message(kTensor, null_tensor);
  return summary_event(wall_time, 0, {value});
}
}  // namespace

std::string hparams_start_event(double wall_time, const std::map<std::string, std::string>& hparams) {
  Proto start;
  for (const auto& [name, text] : hparams) {
    Proto value;  // google.protobuf.Value: number_value 2, string_value 3, bool_value 4
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    if (text == "true" || text == "false") value.varint(4, text == "true" ? 1 : 0);
    else if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(number)) value.fixed64_double(2, number);
    else value.bytes(3, text);
    start.message(1, Proto().bytes(1, name).message(2, value));
  }
  start.fixed64_double(5, wall_time);
  return hparams_event(wall_time, "_hparams_/session_start_info", Proto().message(3, start));
}

std::string hparams_end_event(double wall_time, bool success) {
  const Proto end = Proto().varint(1, success ? 1 : 2).fixed64_double(2, wall_time);
  return hparams_event(wall_time, "_hparams_/session_end_info", Proto().message(4, end));
}

// --- PNG ----------------------------------------------------------------------------------------

namespace {
void png_chunk(std::string& out, const char* type, std::string_view data) {
  auto big_endian = [&](std::uint32_t v) {
    const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                           static_cast<char>(v)};
    out.append(bytes, 4);
  };
  big_endian(static_cast<std::uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.append(type, 4);
  out.append(data.data(), data.size());
  big_endian(static_cast<std::uint32_t>(
      ::crc32(0, reinterpret_cast<const Bytef*>(out.data() + start), static_cast<uInt>(out.size() - start))));
}
}  // namespace

std::string encode_png(const std::uint8_t* pixels, int height, int width, int channels) {
  static const int kColourType[] = {0, 0, 4, 2, 6};  // by channel count
  std::string raw;  // each row: filter byte 0, then the row
  const std::size_t row = static_cast<std::size_t>(width) * channels;
  for (int y = 0; y < height; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(pixels) + y * row, row);
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::string compressed(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(compressed.data()), &size, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), 6) != Z_OK)
    throw Error("PNG: zlib could not compress the image");
  compressed.resize(size);
  std::string header;
  for (int v : {width, height}) {
    const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                           static_cast<char>(v)};
    header.append(bytes, 4);
  }
  header += static_cast<char>(8);
  header += static_cast<char>(kColourType[channels]);
  header.append(3, '\0');  // deflate, adaptive filtering, no interlace
  std::string png("\x89PNG\r\n\x1a\n", 8);
  png_chunk(png, "IHDR", header);
  png_chunk(png, "IDAT", compressed);
  png_chunk(png, "IEND", "");
  return png;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// --- the file -----------------------------------------------------------------------------------

EventFile::EventFile(const std::filesystem::path& folder, int flush_every, double flush_seconds)
    : flush_every_(flush_every), flush_seconds_(flush_seconds), last_flush_(std::chrono::steady_clock::now()) {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const auto seconds = static_cast<long long>(wall_time_now());
  path_ = folder / fmt::format("events.out.tfevents.{:010d}.{}.{}.wanfw", seconds, host, static_cast<long>(getpid()));
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw FileError(fmt::format("{}: cannot create the TensorBoard event file: {}", path_.string(), std::strerror(errno)));
  write(file_version_event(wall_time_now()));
  flush();
}

EventFile::~EventFile() {
  try {
    flush();
  } catch (const std::exception&) {
    // Reported by the explicit flush on close; a destructor must not throw.
  }
  if (fd_ >= 0) ::close(fd_);
}

void EventFile::write(const std::string& event) {
  pending_ += tf_record(event);
  ++pending_events_;
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_flush_).count();
  if (pending_events_ >= flush_every_ || since >= flush_seconds_) flush();
}

void EventFile::flush() {
  std::size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      pending_.erase(0, done);
      throw FileError(fmt::format("{}: writing TensorBoard events failed: {}", path_.string(), std::strerror(error)),
                      error == ENOSPC ? "the disk is full; free space (checkpoints are written separately)" : "");
    }
    done += static_cast<std::size_t>(n);
  }
  pending_.clear();
  pending_events_ = 0;
  last_flush_ = std::chrono::steady_clock::now();
}

}  // namespace wanfw::tb
