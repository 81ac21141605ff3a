#include "wan/weight_names.hpp"

#include <regex>
#include <utility>

#include <fmt/format.h>

namespace wan {

std::string official_name(const std::string& key, WeightLayout layout) {
  if (layout == WeightLayout::Official) return key;
  // Renames between the diffusers conversion and the official names (prefix -> prefix).
  static const std::vector<std::pair<std::regex, std::string>> rules = [] {
    std::vector<std::pair<std::regex, std::string>> r;
    auto add = [&](const char* from, const char* to) { r.emplace_back(std::regex(from), to); };
    add(R"(^condition_embedder\.time_embedder\.linear_1\.)", "time_embedding.0.");
    add(R"(^condition_embedder\.time_embedder\.linear_2\.)", "time_embedding.2.");
    add(R"(^condition_embedder\.time_proj\.)", "time_projection.1.");
    add(R"(^condition_embedder\.text_embedder\.linear_1\.)", "text_embedding.0.");
    add(R"(^condition_embedder\.text_embedder\.linear_2\.)", "text_embedding.2.");
    // Main blocks and VACE blocks alike ("blocks.N." or "vace_blocks.N.").
    add(R"(^((?:vace_)?blocks\.\d+)\.attn1\.to_out\.0\.)", "$1.self_attn.o.");
    add(R"(^((?:vace_)?blocks\.\d+)\.attn1\.to_([qkv])\.)", "$1.self_attn.$2.");
    add(R"(^((?:vace_)?blocks\.\d+)\.attn1\.norm_([qk])\.)", "$1.self_attn.norm_$2.");
    add(R"(^((?:vace_)?blocks\.\d+)\.attn2\.to_out\.0\.)", "$1.cross_attn.o.");
    add(R"(^((?:vace_)?blocks\.\d+)\.attn2\.to_([qkv])\.)", "$1.cross_attn.$2.");
    add(R"(^((?:vace_)?blocks\.\d+)\.attn2\.norm_([qk])\.)", "$1.cross_attn.norm_$2.");
    add(R"(^((?:vace_)?blocks\.\d+)\.norm2\.)", "$1.norm3.");  // the affine cross-attention norm
    add(R"(^((?:vace_)?blocks\.\d+)\.ffn\.net\.0\.proj\.)", "$1.ffn.0.");
    add(R"(^((?:vace_)?blocks\.\d+)\.ffn\.net\.2\.)", "$1.ffn.2.");
    add(R"(^((?:vace_)?blocks\.\d+)\.scale_shift_table$)", "$1.modulation");
    add(R"(^vace_blocks\.(\d+)\.proj_in\.)", "vace_blocks.$1.before_proj.");
    add(R"(^vace_blocks\.(\d+)\.proj_out\.)", "vace_blocks.$1.after_proj.");
    add(R"(^proj_out\.)", "head.head.");
    add(R"(^scale_shift_table$)", "head.modulation");
    return r;
  }();
  for (const auto& [pattern, replacement] : rules)
    if (std::regex_search(key, pattern)) return std::regex_replace(key, pattern, replacement);
  return key;
}

std::vector<std::pair<std::string, std::array<std::int64_t, 2>>> adaptable_layers(const WanConfig& config) {
  std::vector<std::pair<std::string, std::array<std::int64_t, 2>>> out;
  const auto add = [&](const std::string& block) {
    for (const char* attention : {"self_attn", "cross_attn"})
      for (const char* projection : {"q", "k", "v", "o"})
        out.push_back({block + attention + "." + projection, {config.dim, config.dim}});
    out.push_back({block + "ffn.0", {config.ffn_dim, config.dim}});
    out.push_back({block + "ffn.2", {config.dim, config.ffn_dim}});
  };
  for (std::int64_t i = 0; i < config.num_layers; ++i) add(fmt::format("blocks.{}.", i));
  for (std::size_t n = 0; n < config.vace_layers.size(); ++n) add(fmt::format("vace_blocks.{}.", n));
  return out;
}

}  // namespace wan
