#include "events.hpp"

#include <cmath>

#include "proto.hpp"

namespace wanfw::tb {

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
      if (std::isfinite(v))
        counts[std::min<std::size_t>(kBuckets - 1, static_cast<std::size_t>((v - lo) / width))] += 1;
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
  value.bytes(kTag, tag + "/text_summary")
      .message(kMetadata, plugin_metadata("text", Proto()))
      .message(kTensor, tensor);
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
    if (text == "true" || text == "false")
      value.varint(4, text == "true" ? 1 : 0);
    else if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(number))
      value.fixed64_double(2, number);
    else
      value.bytes(3, text);
    start.message(1, Proto().bytes(1, name).message(2, value));
  }
  start.fixed64_double(5, wall_time);
  return hparams_event(wall_time, "_hparams_/session_start_info", Proto().message(3, start));
}

std::string hparams_end_event(double wall_time, bool success) {
  const Proto end = Proto().varint(1, success ? 1 : 2).fixed64_double(2, wall_time);
  return hparams_event(wall_time, "_hparams_/session_end_info", Proto().message(4, end));
}

}  // namespace wanfw::tb
