// The `lora.*` options of the Wan model plugins (wan/wan_options.hpp): adapters trained, their
// layers, and adapter files applied when the model is built.
#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wan/wan_options.hpp"
#include "wanfw/error.hpp"

namespace wan {

using T = wanfw::OptionType;

std::vector<wanfw::OptionSpec> lora_options(const std::string& trained) {
  const std::vector<wanfw::OptionSpec> entry = {
      wanfw::option("file", T::String).required().doc("The adapter's .safetensors (Wan / ComfyUI, diffusers PEFT or "
                                                      "kohya keys)."),
      wanfw::option("scale", T::Number).value("1.0").doc("Multiplies the adapter's update (its alpha / rank included)."),
      wanfw::option("train", T::Boolean)
          .value("false")
          .doc("false: merged into the frozen base weights; true: the trained adapters start from it (same layers "
               "and rank)."),
      wanfw::option("expert", T::String)
          .value("\"\"")
          .doc("Two experts: high_noise or low_noise, the one it belongs to; empty: every DiT."),
  };
  return {
      wanfw::option("lora.rank", T::Integer)
          .value("0")
          .doc(fmt::format("Rank of the low-rank adapters trained on {}; 0 trains every weight. With a rank, the base "
                           "weights are frozen and only the adapters train, checkpoint and synchronise.",
                           trained)),
      wanfw::option("lora.alpha", T::Number).value("0").doc("The adapters' update is scaled by alpha / rank; 0 takes "
                                                            "alpha = rank."),
      wanfw::option("lora.dropout", T::Number)
          .value("0")
          .doc("Dropout on the adapters' input while training, drawn from each sample's own stream."),
      wanfw::option("lora.targets", T::StringList)
          .value("[]")
          .doc("Layers that get adapters: patterns ('*' any run, '?' one character) over the official names of the "
               "attention projections (blocks.N.self_attn.q|k|v|o, blocks.N.cross_attn.q|k|v|o) and feed-forward "
               "layers (blocks.N.ffn.0, blocks.N.ffn.2), and a VACE model's VACE blocks' (vace_blocks.N.*). Empty: "
               "every attention projection and feed-forward layer of the blocks the model trains: blocks.* for a "
               "base model, vace_blocks.* for a VACE model (its control branch, as the VACE trainers adapt it)."),
      wanfw::option("lora.lr_scale", T::Number).value("1.0").doc("The adapters' learning rate as a multiple of "
                                                                 "optimizer.lr (their own parameter group)."),
      wanfw::option("lora.weight_decay", T::Number).doc("The adapters' weight decay; unset: optimizer.weight_decay."),
      wanfw::option("lora.load", T::EntryList)
          .value("[]")
          .entries(entry)
          .doc("Existing adapters applied when the model is built, in order: `- {file: a.safetensors, scale: 1.0}` "
               "merges one into the frozen base (a Lightning LoRA, say); `train: true` trains it further."),
  };
}

std::vector<std::string> default_lora_targets(const WanConfig& config) {
  const std::string blocks = config.has_vace() ? "vace_blocks" : "blocks";
  return {blocks + ".*.self_attn.*", blocks + ".*.cross_attn.*", blocks + ".*.ffn.*"};
}

LoraSettings lora_settings_from(const wanfw::Options& o, const WanConfig& config, Expert expert) {
  LoraSettings s;
  s.rank = o.integer("lora.rank");
  if (s.rank < 0) o.fail("lora.rank", "must be 0 (no adapters) or positive");
  const std::int64_t smallest = std::min(config.dim, config.ffn_dim);
  if (s.rank > smallest)
    o.fail("lora.rank", fmt::format("{} exceeds the smallest adapted width ({}): a low-rank adapter needs rank below it",
                                    s.rank, smallest),
           "ranks of 4 to 128 are usual");
  s.alpha = o.number("lora.alpha") > 0 ? o.number("lora.alpha") : static_cast<double>(s.rank);
  if (o.number("lora.alpha") < 0) o.fail("lora.alpha", "must be positive (0 takes the rank)");
  s.dropout = o.number("lora.dropout");
  if (!(s.dropout >= 0 && s.dropout < 1)) o.fail("lora.dropout", "must be in [0, 1)");
  s.targets = o.strings("lora.targets");
  if (s.targets.empty()) s.targets = default_lora_targets(config);
  s.lr_scale = o.number("lora.lr_scale");
  if (!(s.lr_scale > 0)) o.fail("lora.lr_scale", "must be positive");
  if (o.has("lora.weight_decay")) s.weight_decay = o.number("lora.weight_decay");
  if (s.enabled()) {
    std::vector<std::string> unmatched;
    target_layers(config, s.targets, &unmatched);
    if (!unmatched.empty())
      o.fail("lora.targets",
             fmt::format("{} select{} no layer", fmt::join(unmatched, ", "), unmatched.size() == 1 ? "s" : ""),
             "patterns match whole official names: blocks.N.self_attn.q|k|v|o, blocks.N.cross_attn.q|k|v|o, "
             "blocks.N.ffn.0, blocks.N.ffn.2 ('*' any run of characters)");
  }
  for (const wanfw::Options& entry : o.entries("lora.load")) {
    AdapterLoad load;
    load.file = entry.string("file");
    load.scale = entry.number("scale");
    load.train = entry.boolean("train");
    load.expert = entry.string("expert");
    load.where = fmt::format("({} at {})", entry.section(), entry.where("file").str());
    if (load.train && !s.enabled())
      entry.fail("train", "trains an adapter further, but model.lora.rank is 0", "set model.lora.rank to its rank");
    if (!load.expert.empty() && load.expert != "high_noise" && load.expert != "low_noise")
      entry.fail("expert", fmt::format("'{}' is not high_noise or low_noise", load.expert));
    if (!load.expert.empty() && expert == Expert::None)
      entry.fail("expert", "the model has no experts", "leave expert empty");
    if ((load.expert == "high_noise" && expert == Expert::LowNoise) ||
        (load.expert == "low_noise" && expert == Expert::HighNoise))
      entry.fail("expert", fmt::format("the model trains the other expert only ({})",
                                       expert == Expert::LowNoise ? "low_noise" : "high_noise"));
    s.load.push_back(std::move(load));
  }
  return s;
}

}  // namespace wan
