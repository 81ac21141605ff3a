#pragma once
// Internal: the numbers an adapter file's metadata states, read with their types.

#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace wan {

/// Alpha and rank as the file's metadata gives them: diffusers/PEFT's `lora_adapter_metadata`
/// (JSON: `lora_alpha`, `r`) or kohya's `ss_network_alpha` / `ss_network_dim`. A number written
/// as a numeric string ("8", "8.0") is read as that number; anything else is refused with the
/// field and the file named, never dropped. Alpha must be finite and positive, the rank >= 1.
struct AdapterMetadata {
  std::optional<double> alpha;
  std::optional<std::int64_t> rank;
  std::string alpha_field;  ///< where alpha came from, for messages
  std::string rank_field;
};

AdapterMetadata read_adapter_metadata(const std::map<std::string, std::string>& metadata,
                                      const std::filesystem::path& file);

/// Checks an alpha read from `field` of `file` (a tensor or metadata): finite and positive.
void check_adapter_alpha(double alpha, const std::filesystem::path& file, const std::string& field);

}  // namespace wan
