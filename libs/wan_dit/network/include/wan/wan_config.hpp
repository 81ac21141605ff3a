#pragma once
// The Wan DiT's dimensions: presets from the public configs, and checks before any allocation.

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wan {

/// Where a parameter sits in the DiT: outside the blocks (embeddings, time projection, head), in a
/// main block, in a VACE block, or in the VACE branch's patch embedding. Blocks are units
/// (wanfw/parallel/units.hpp): what fsdp gathers and block swap streams.
enum class ParameterPlace { Rest, Block, VaceBlock, VaceEmbedding };

/// One parameter as the network builds it, worked out without allocating.
struct ParameterSpec {
  std::string name;  ///< the official name ("blocks.3.self_attn.q.weight")
  std::vector<std::int64_t> shape;
  ParameterPlace place = ParameterPlace::Rest;
  std::int64_t block = -1;  ///< its block's index among the main or the VACE blocks; -1 outside them
  /// An attention or feed-forward projection's weight inside a block (a WanLinear's): what a frozen
  /// fp8 base stores in e4m3 with scales (BaseStorage).
  bool projection = false;
  std::int64_t numel() const;
  bool in_vace_branch() const { return place == ParameterPlace::VaceBlock || place == ParameterPlace::VaceEmbedding; }
};

/// How a frozen base stores its weights: with `fp8`, the projections of every block in e4m3 with
/// scales; a VACE branch that trains whole (`trained_vace`) keeps its blocks in the weights' dtype.
/// The network quantizes by it (WanPlacement::storage) and the memory estimate counts by it.
struct BaseStorage {
  bool fp8 = false;
  bool trained_vace = false;
  /// Whether the blocks at `place` hold their projections in fp8.
  bool fp8_blocks(ParameterPlace place) const {
    return fp8 && (place == ParameterPlace::Block || (place == ParameterPlace::VaceBlock && !trained_vace));
  }
  bool fp8_parameter(const ParameterSpec& p) const { return p.projection && fp8_blocks(p.place); }
};

struct WanConfig {
  std::string preset;
  std::int64_t dim = 0;
  std::int64_t ffn_dim = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_layers = 0;
  std::int64_t in_dim = 0;   ///< latent channels in (36 for I2V: noise + mask + image latent)
  std::int64_t out_dim = 0;  ///< latent channels out
  std::int64_t text_dim = 4096;
  /// Text tokens every context is zero-padded to before `text_embedding`, as the official model
  /// does (512 in every public config); longer contexts are refused.
  std::int64_t text_len = 512;
  std::int64_t freq_dim = 256;
  std::array<std::int64_t, 3> patch = {1, 2, 2};
  double eps = 1e-6;
  double rope_theta = 10000.0;
  std::int64_t rope_max_positions = 1024;
  /// For the two-expert (MoE) presets: the timestep (0..1000) at which the high-noise expert
  /// hands over to the low-noise one; 0 for single-model presets.
  std::int64_t expert_boundary = 0;
  /// VACE (the control branch): the main blocks after which its hints are added, one VACE block
  /// each, ascending from 0 (the official models: every 2nd block of 1.3B, every 5th of 14B);
  /// empty: a base model without the branch.
  std::vector<std::int64_t> vace_layers;
  /// Channels of the VACE context: inactive 16 + reactive 16 latents and the 64-channel mask.
  std::int64_t vace_in_dim = 96;

  bool has_vace() const { return !vace_layers.empty(); }

  std::int64_t head_dim() const { return dim / num_heads; }
  /// RoPE split of the head dim into frame, height, width parts: d-4(d/6), 2(d/6), 2(d/6).
  std::array<std::int64_t, 3> rope_split() const;
  /// Every parameter the network builds: name, shape, place (order not significant). A unit test
  /// holds it to the built module's parameters, dtypes under an fp8 base included.
  std::vector<ParameterSpec> parameters() const;
  /// Trainable parameters, computed without allocating anything.
  std::int64_t parameter_count() const;
  /// The VACE branch's parameters (its blocks and patch embedding); 0 without one.
  std::int64_t vace_parameter_count() const;
  /// Throws wanfw::Error when the dimensions do not fit together (dim % heads, RoPE split).
  void validate() const;
  /// validate()'s part for the VACE branch: vace_layers from 0, ascending, within the blocks.
  void validate_vace() const;
};

/// A named preset: wan2.1-t2v-1.3b, wan2.2-ti2v-5b, wan2.2-t2v-a14b, wan2.2-i2v-a14b, the VACE
/// models wan2.1-vace-1.3b, wan2.1-vace-14b, wan2.2-vace-fun-a14b, and tiny / tiny-vace.
WanConfig wan_preset(const std::string& name);
const std::vector<std::string>& wan_preset_names();

/// 4999787712 -> "4,999,787,712" (parameter counts in messages).
std::string with_thousands(std::int64_t n);

/// The bytes of one value of a weights' `dtype` option: 2 for "bfloat16", 4 for "float32".
double bytes_per_value(const std::string& dtype);

}  // namespace wan
