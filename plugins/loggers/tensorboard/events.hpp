#pragma once
// TensorBoard events as serialised Event messages: scalars, histograms, images, text and the
// hparams plugin's session records. Field numbers follow TensorBoard's .proto files
// (event.proto, summary.proto, histogram.proto, tensor.proto, tensorboard/plugins/hparams/plugin_data.proto).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace wanfw::tb {

/// Events (serialised Event messages).
std::string file_version_event(double wall_time);
std::string session_start_event(double wall_time, std::int64_t step);
std::string scalars_event(double wall_time, std::int64_t step, const std::map<std::string, double>& scalars);
std::string histogram_event(double wall_time, std::int64_t step, const std::string& tag,
                            const std::vector<double>& values);
std::string image_event(double wall_time, std::int64_t step, const std::string& tag, int height, int width,
                        int channels, const std::string& png);
std::string text_event(double wall_time, std::int64_t step, const std::string& tag, const std::string& text);
/// The hparams plugin's session_start_info: numbers, booleans ("true"/"false") and strings.
std::string hparams_start_event(double wall_time, const std::map<std::string, std::string>& hparams);
std::string hparams_end_event(double wall_time, bool success);

}  // namespace wanfw::tb
