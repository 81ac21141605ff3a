#include "vae_names.hpp"

#include <array>
#include <cstdlib>
#include <regex>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"

namespace wan {

namespace {

/// `text` with its first `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

}  // namespace

std::string diffusers_vae_name(const std::string& official, const VaeConfig& config) {
  std::string name = official;
  if (name.starts_with("conv1.")) return "quant_conv." + name.substr(6);
  if (name.starts_with("conv2.")) return "post_quant_conv." + name.substr(6);
  const std::int64_t resnets_down = config.num_res_blocks, resnets_up = config.num_res_blocks + 1;
  std::smatch m;
  // Wan2.2's nested stages; Wan2.1's flat lists (a decoder stage: its resnets, then its upsampler).
  static const std::regex nested(R"(^(encoder|decoder)\.(down|up)samples\.(\d+)\.(down|up)samples\.(\d+)\.)");
  static const std::regex flat_up(R"(^decoder\.upsamples\.(\d+)\.)");
  if (std::regex_search(name, m, nested)) {
    const bool down = m[2] == "down";
    const long j = std::atol(m[5].str().c_str());
    const std::string stage = m[1].str() + (down ? ".down_blocks." : ".up_blocks.") + m[3].str() + ".";
    const bool resnet = j < (down ? resnets_down : resnets_up);
    name = stage + (resnet ? "resnets." + std::to_string(j) + "." : (down ? "downsampler." : "upsampler.")) +
           m.suffix().str();
  } else if (std::regex_search(name, m, flat_up)) {
    const long n = std::atol(m[1].str().c_str()), group = resnets_up + 1;
    const long stage = n / group, j = n % group;
    name = "decoder.up_blocks." + std::to_string(stage) + "." +
           (j < resnets_up ? "resnets." + std::to_string(j) + "." : std::string("upsamplers.0.")) + m.suffix().str();
  } else if (name.starts_with("encoder.downsamples.")) {
    name = replaced(name, "encoder.downsamples.", "encoder.down_blocks.");
  }
  for (const char* side : {"encoder.", "decoder."}) {
    const std::string p = side;
    if (name.starts_with(p + "conv1.")) name = p + "conv_in." + name.substr(p.size() + 6);
    name = replaced(name, p + "head.0.", p + "norm_out.");
    name = replaced(name, p + "head.2.", p + "conv_out.");
    name = replaced(name, p + "middle.0.", p + "mid_block.resnets.0.");
    name = replaced(name, p + "middle.1.", p + "mid_block.attentions.0.");
    name = replaced(name, p + "middle.2.", p + "mid_block.resnets.1.");
  }
  static const std::array<std::pair<const char*, const char*>, 5> residual = {
      {{".residual.0.", ".norm1."}, {".residual.2.", ".conv1."}, {".residual.3.", ".norm2."}, {".residual.6.", ".conv2."},
       {".shortcut.", ".conv_shortcut."}}};
  for (const auto& [from, to] : residual) name = replaced(name, from, to);
  return name;
}

std::map<std::string, std::string> match_vae_tensors(const wanfw::SafetensorsCheckpoint& file,
                                                     const std::filesystem::path& weights, const VaeConfig& config,
                                                     const std::map<std::string, std::vector<std::int64_t>>& expected) {
  std::map<std::string, std::string> source;  // diffusers name -> name in the file
  for (const std::string& name : file.names()) {
    const std::string ours = diffusers_vae_name(name, config);
    if (!source.emplace(ours, name).second)
      throw wanfw::FileError(fmt::format("{}: tensors {} and {} are the same parameter {}", weights.string(),
                                         source.at(ours), name, ours));
  }
  for (const auto& [parameter, shape] : expected) {
    const auto it = source.find(parameter);
    if (it == source.end())
      throw wanfw::FileError(fmt::format("{}: the {} VAE's parameter {} is missing", weights.string(), config.name,
                                         parameter),
                             "use the VAE the model was trained with (Wan2.1's for 2.1 and A14B, Wan2.2's for TI2V-5B)");
    const std::vector<std::int64_t>& stored = file.record(it->second).shape;
    if (stored != shape)
      throw wanfw::FileError(fmt::format("{}: {} has shape {}; the {} VAE's {} is [{}]", weights.string(), it->second,
                                         fmt::join(stored, "x"), config.name, parameter, fmt::join(shape, ", ")));
  }
  for (const auto& [ours, theirs] : source)
    if (!expected.count(ours))
      throw wanfw::FileError(fmt::format("{}: tensor {} is no parameter of the {} VAE", weights.string(), theirs,
                                         config.name),
                             "is this a Wan VAE? its config.json must match its weights");
  return source;
}

}  // namespace wan
