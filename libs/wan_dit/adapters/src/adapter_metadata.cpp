#include "adapter_metadata.hpp"

#include <charconv>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wanfw/error.hpp"

namespace wan {

namespace {

constexpr const char* kPeftKey = "lora_adapter_metadata";
constexpr const char* kHint =
    "fix the file's metadata (alpha a positive number, the rank a whole number >= 1), or write the adapter again";

/// The number a metadata value states: a JSON number, or a string holding exactly one number.
double number_of(const nlohmann::json& value, const std::filesystem::path& file, const std::string& field) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    double parsed = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
    if (error == std::errc() && end == text.data() + text.size() && !text.empty()) return parsed;
    throw wanfw::FileError(fmt::format("adapter {}: metadata field {} is \"{}\", not a number", file.string(), field,
                                       wanfw::shortened(text)),
                           kHint);
  }
  throw wanfw::FileError(fmt::format("adapter {}: metadata field {} is {}, not a number", file.string(), field,
                                     wanfw::shortened(value.dump())),
                         kHint);
}

std::int64_t rank_of(double value, const std::filesystem::path& file, const std::string& field) {
  if (!(value >= 1 && value <= 1e9 && std::floor(value) == value))
    throw wanfw::FileError(fmt::format("adapter {}: metadata field {} gives the rank {}; a rank is a whole number >= 1",
                                       file.string(), field, value),
                           kHint);
  return static_cast<std::int64_t>(value);
}

}  // namespace

void check_adapter_alpha(double alpha, const std::filesystem::path& file, const std::string& field) {
  if (!std::isfinite(alpha) || alpha <= 0)
    throw wanfw::FileError(fmt::format("adapter {}: {} gives alpha {}; alpha must be a positive finite number "
                                       "(the update is scaled by alpha / rank)",
                                       file.string(), field, alpha),
                           kHint);
}

AdapterMetadata read_adapter_metadata(const std::map<std::string, std::string>& metadata,
                                      const std::filesystem::path& file) {
  AdapterMetadata out;
  if (auto it = metadata.find(kPeftKey); it != metadata.end()) {
    const auto parsed = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object())
      throw wanfw::FileError(fmt::format("adapter {}: metadata field {} is not a JSON object", file.string(), kPeftKey),
                             kHint);
    if (parsed.contains("lora_alpha")) {
      out.alpha_field = fmt::format("'lora_alpha' (in {})", kPeftKey);
      out.alpha = number_of(parsed["lora_alpha"], file, out.alpha_field);
    }
    if (parsed.contains("alpha_pattern") && !parsed["alpha_pattern"].empty())
      throw wanfw::FileError(fmt::format("adapter {}: metadata field 'alpha_pattern' (in {}) gives some layers an "
                                         "alpha of their own, which wanfw does not apply",
                                         file.string(), kPeftKey),
                             "write the adapter with one lora_alpha, or with an .alpha tensor per layer");
    const bool ranks_per_layer = parsed.contains("rank_pattern") && !parsed["rank_pattern"].empty();
    if (parsed.contains("r") && !ranks_per_layer) {
      out.rank_field = fmt::format("'r' (in {})", kPeftKey);
      out.rank = rank_of(number_of(parsed["r"], file, out.rank_field), file, out.rank_field);
    }
  }
  // kohya's resized adapters say "Dynamic": each layer has its own rank and .alpha tensor.
  const auto stated = [&](const char* key) {
    auto it = metadata.find(key);
    return it != metadata.end() && it->second != "Dynamic" ? std::optional<std::string>(it->second) : std::nullopt;
  };
  if (auto alpha = stated("ss_network_alpha"); alpha && !out.alpha) {
    out.alpha_field = "'ss_network_alpha'";
    out.alpha = number_of(nlohmann::json(*alpha), file, out.alpha_field);
  }
  if (auto dim = stated("ss_network_dim"); dim && !out.rank) {
    out.rank_field = "'ss_network_dim'";
    out.rank = rank_of(number_of(nlohmann::json(*dim), file, out.rank_field), file, out.rank_field);
  }
  if (out.alpha) check_adapter_alpha(*out.alpha, file, "metadata field " + out.alpha_field);
  return out;
}

}  // namespace wan
