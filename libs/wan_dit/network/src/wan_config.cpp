#include "wan/wan_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"
#include "wanfw/options.hpp"

namespace wan {

namespace {
struct Preset {
  const char* name;
  std::int64_t dim, ffn_dim, num_heads, num_layers, in_dim, out_dim, text_dim, text_len;
  std::int64_t expert_boundary;
  std::int64_t vace_every = 0;  ///< VACE: a hint after every n-th block from block 0; 0: no branch
};
// Dimensions of the public Wan configs; `tiny` exists for tests and quick runs on a CPU.
constexpr Preset kPresets[] = {
    {"wan2.1-t2v-1.3b", 1536, 8960, 12, 30, 16, 16, 4096, 512, 0},
    {"wan2.2-ti2v-5b", 3072, 14336, 24, 30, 48, 48, 4096, 512, 0},
    {"wan2.2-t2v-a14b", 5120, 13824, 40, 40, 16, 16, 4096, 512, 875},  // boundary_ratio 0.875
    {"wan2.2-i2v-a14b", 5120, 13824, 40, 40, 36, 16, 4096, 512, 900},  // boundary_ratio 0.9
    {"tiny", 48, 96, 2, 2, 4, 4, 32, 16, 0},
    // VACE: the base DiT and its control branch (diffusers' conversion configs).
    {"wan2.1-vace-1.3b", 1536, 8960, 12, 30, 16, 16, 4096, 512, 0, 2},
    {"wan2.1-vace-14b", 5120, 13824, 40, 40, 16, 16, 4096, 512, 0, 5},
    {"wan2.2-vace-fun-a14b", 5120, 13824, 40, 40, 16, 16, 4096, 512, 875, 5},  // boundary_ratio 0.875
    {"tiny-vace", 48, 96, 2, 4, 4, 4, 32, 16, 0, 2},
};
}  // namespace

const std::vector<std::string>& wan_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& p : kPresets) out.emplace_back(p.name);
    return out;
  }();
  return names;
}

WanConfig wan_preset(const std::string& name) {
  for (const auto& p : kPresets)
    if (name == p.name) {
      WanConfig c;
      c.preset = p.name;
      c.dim = p.dim;
      c.ffn_dim = p.ffn_dim;
      c.num_heads = p.num_heads;
      c.num_layers = p.num_layers;
      c.in_dim = p.in_dim;
      c.out_dim = p.out_dim;
      c.text_dim = p.text_dim;
      c.text_len = p.text_len;
      c.expert_boundary = p.expert_boundary;
      for (std::int64_t i = 0; p.vace_every > 0 && i < p.num_layers; i += p.vace_every) c.vace_layers.push_back(i);
      c.vace_in_dim = 2 * p.out_dim + 64;  // inactive and reactive latents, the 8 x 8 mask cell
      return c;
    }
  throw wanfw::Error(fmt::format("unknown Wan preset '{}'", name),
                     fmt::format("presets: {}", fmt::join(wan_preset_names(), ", ")));
}

std::array<std::int64_t, 3> WanConfig::rope_split() const {
  const std::int64_t d = head_dim();
  return {d - 4 * (d / 6), 2 * (d / 6), 2 * (d / 6)};
}

void WanConfig::validate() const {
  for (auto [name, value] : {std::pair{"dim", dim}, {"ffn_dim", ffn_dim}, {"num_heads", num_heads},
                             {"num_layers", num_layers}, {"in_dim", in_dim}, {"out_dim", out_dim},
                             {"text_dim", text_dim}, {"text_len", text_len}, {"freq_dim", freq_dim}})
    if (value < 1) throw wanfw::Error(fmt::format("Wan config: {} must be positive, got {}", name, value));
  if (dim % num_heads != 0)
    throw wanfw::Error(fmt::format("Wan config: dim {} is not divisible by num_heads {}", dim, num_heads),
                       "choose dim = num_heads x head_dim");
  const auto split = rope_split();
  if (head_dim() % 2 != 0 || split[0] <= 0 || split[0] % 2 != 0 || split[1] <= 0)
    throw wanfw::Error(fmt::format("Wan config: head dim {} (dim {} / {} heads) cannot be split for 3-D RoPE into "
                                   "even frame/height/width parts ({}, {}, {})",
                                   head_dim(), dim, num_heads, split[0], split[1], split[2]),
                       "use a head dim that is even and at least 6, such as 128 (the official models) or 24");
  if (freq_dim % 2 != 0) throw wanfw::Error(fmt::format("Wan config: freq_dim {} must be even", freq_dim));
  validate_vace();
}

void WanConfig::validate_vace() const {
  if (!has_vace()) return;
  const auto where = fmt::format("Wan config: vace_layers [{}]", fmt::join(vace_layers, ", "));
  if (vace_layers.front() != 0)
    throw wanfw::Error(where + " does not start at block 0, where the branch takes the embedded latents",
                       "list the main blocks whose outputs get a hint, the first 0 (the official models: 0, 2, 4, ...)");
  for (std::size_t k = 1; k < vace_layers.size(); ++k)
    if (vace_layers[k] <= vace_layers[k - 1])
      throw wanfw::Error(where + " is not strictly ascending", "list each hinted block once, in order");
  if (vace_layers.back() >= num_layers)
    throw wanfw::Error(fmt::format("{} names block {}, but the model has {} blocks", where, vace_layers.back(), num_layers));
  if (vace_in_dim < 1) throw wanfw::Error(fmt::format("Wan config: vace_in_dim must be positive, got {}", vace_in_dim));
}

std::int64_t ParameterSpec::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

std::vector<ParameterSpec> WanConfig::parameters() const {
  std::vector<ParameterSpec> out;
  ParameterPlace place = ParameterPlace::Rest;
  std::int64_t index = -1;
  const auto tensor = [&](const std::string& name, std::vector<std::int64_t> shape, bool projection = false) {
    out.push_back({name, std::move(shape), place, index, projection});
  };
  // A Linear's weight and bias; `projection`: a block's WanLinear (attention, feed-forward).
  const auto linear = [&](const std::string& name, std::int64_t in, std::int64_t features, bool projection = false) {
    tensor(name + ".weight", {features, in}, projection);
    tensor(name + ".bias", {features});
  };
  const std::int64_t patch_volume = patch[0] * patch[1] * patch[2];
  tensor("patch_embedding.weight", {dim, in_dim, patch[0], patch[1], patch[2]});
  tensor("patch_embedding.bias", {dim});
  linear("text_embedding.0", text_dim, dim);
  linear("text_embedding.2", dim, dim);
  linear("time_embedding.0", freq_dim, dim);
  linear("time_embedding.2", dim, dim);
  linear("time_projection.1", dim, 6 * dim);
  const auto block_parameters = [&](const std::string& block) {
    for (const char* attention : {"self_attn", "cross_attn"}) {
      const std::string prefix = block + attention + ".";
      for (const char* projection : {"q", "k", "v", "o"}) linear(prefix + projection, dim, dim, true);
      tensor(prefix + "norm_q.weight", {dim});
      tensor(prefix + "norm_k.weight", {dim});
      if (std::string(attention) == "self_attn") {
        tensor(block + "norm3.weight", {dim});
        tensor(block + "norm3.bias", {dim});
      }
    }
    linear(block + "ffn.0", dim, ffn_dim, true);
    linear(block + "ffn.2", ffn_dim, dim, true);
    tensor(block + "modulation", {1, 6, dim});
  };
  place = ParameterPlace::Block;
  for (index = 0; index < num_layers; ++index) block_parameters("blocks." + std::to_string(index) + ".");
  place = ParameterPlace::VaceBlock;
  for (index = 0; index < std::ssize(vace_layers); ++index) {
    const std::string block = "vace_blocks." + std::to_string(index) + ".";
    block_parameters(block);
    if (index == 0) linear(block + "before_proj", dim, dim);
    linear(block + "after_proj", dim, dim);
  }
  index = -1;
  if (has_vace()) {
    place = ParameterPlace::VaceEmbedding;
    tensor("vace_patch_embedding.weight", {dim, vace_in_dim, patch[0], patch[1], patch[2]});
    tensor("vace_patch_embedding.bias", {dim});
  }
  place = ParameterPlace::Rest;
  linear("head.head", dim, patch_volume * out_dim);
  tensor("head.modulation", {1, 2, dim});
  return out;
}

std::int64_t WanConfig::parameter_count() const {
  std::int64_t n = 0;
  for (const ParameterSpec& p : parameters()) n += p.numel();
  return n;
}

std::int64_t WanConfig::vace_parameter_count() const {
  std::int64_t n = 0;
  for (const ParameterSpec& p : parameters())
    if (p.in_vace_branch()) n += p.numel();
  return n;
}

std::string with_thousands(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

double bytes_per_value(const std::string& dtype) {
  return static_cast<double>(c10::elementSize(wanfw::dtype_named(dtype)));
}

}  // namespace wan
