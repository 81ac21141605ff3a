#include "wan/wan_options.hpp"

#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"

namespace wan {

using T = wanfw::OptionType;

std::vector<wanfw::OptionSpec> dimension_options(const std::string& prefix, const std::string& default_preset,
                                                 const std::string& inherit) {
  std::vector<std::string> presets = wan_preset_names();
  const std::string keeps = inherit.empty() ? "the preset's" : fmt::format("the preset's (or {}'s)", inherit);
  auto preset = wanfw::option(prefix + "preset", inherit.empty() ? T::Choice : T::String)
                    .value(default_preset.empty() ? "\"\"" : default_preset)
                    .doc(inherit.empty() ? "Model dimensions from the public configs."
                                         : fmt::format("Model dimensions from the public configs ({}); empty: {}'s.",
                                                       fmt::join(presets, ", "), inherit));
  if (inherit.empty()) preset.choices(presets);
  return {
      preset,
      wanfw::option(prefix + "dim", T::Integer).value("0").doc(fmt::format("Hidden size; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "ffn_dim", T::Integer).value("0").doc(fmt::format("Feed-forward size; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "num_heads", T::Integer).value("0").doc(fmt::format("Attention heads; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "num_layers", T::Integer).value("0").doc(fmt::format("Blocks; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "in_dim", T::Integer).value("0").doc(fmt::format("Input latent channels; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "out_dim", T::Integer)
          .value("0")
          .doc(fmt::format("Output latent channels; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "text_dim", T::Integer).value("0").doc(fmt::format("Text-encoder width; 0 keeps {}.", keeps)),
      wanfw::option(prefix + "text_len", T::Integer)
          .value("0")
          .doc(fmt::format("Tokens every text context is zero-padded to before the text embedding, as the official "
                           "model does (longer contexts are refused); synthetic contexts are this long unless "
                           "data.text_tokens says otherwise. 0 keeps {} (512; 16 for tiny).",
                           keeps)),
  };
}

WanConfig config_from_options(const wanfw::Options& o, const std::string& prefix, const WanConfig* base) {
  const std::string preset_option = prefix + "preset";
  WanConfig c;
  const std::string preset = o.string(preset_option);
  if (preset.empty() && base != nullptr) {
    c = *base;
  } else {
    try {
      c = wan_preset(preset);
    } catch (const wanfw::Error& e) {
      o.fail(preset_option, e.what());
    }
  }
  for (auto [name, field] : {std::pair{"dim", &c.dim}, {"ffn_dim", &c.ffn_dim}, {"num_heads", &c.num_heads},
                             {"num_layers", &c.num_layers}, {"in_dim", &c.in_dim}, {"out_dim", &c.out_dim},
                             {"text_dim", &c.text_dim}, {"text_len", &c.text_len}})
    if (o.integer(prefix + name) > 0) *field = o.integer(prefix + name);
  try {
    c.validate();
  } catch (const wanfw::Error& e) {
    o.fail(preset_option, e.what(), "adjust dim / num_heads so that the head dim splits for RoPE");
  }
  return c;
}

}  // namespace wan
