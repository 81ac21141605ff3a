#include "wan/memory_options.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "wanfw/log.hpp"

namespace wan {

using T = wanfw::OptionType;

wanfw::OptionSpec base_dtype_option(const std::string& prefix, const std::string& frozen) {
  return wanfw::option(prefix + "base_dtype", T::Choice)
      .value("dtype")
      .choices({"dtype", "float8_e4m3fn"})
      .doc("Storage of the frozen base's block Linear weights (" + frozen +
           "): dtype keeps them in the weights' dtype; float8_e4m3fn stores them in fp8 with float32 scales "
           "(one per 64 inputs), half of bfloat16's bytes, dequantized for each product; norms, modulation, "
           "embeddings and head stay in dtype. An fp8 checkpoint (ComfyUI, Kijai, musubi-tuner) is read as "
           "stored, a wider one quantized while loading, tensor by tensor (docs/low-memory.md).");
}

bool fp8_base_from(const wanfw::Options& options, const std::string& prefix, bool trains_base) {
  const std::string name = prefix + "base_dtype";
  if (options.string(name) != "float8_e4m3fn") return false;
  if (trains_base)
    options.fail(name, "an fp8 base is frozen, but this run trains the base's weights (no adapters)",
                 "train adapters on it (lora.rank > 0), or keep base_dtype: dtype");
  return true;
}

wanfw::OptionSpec activation_offload_option() {
  return wanfw::option("activation_offload", T::Boolean)
      .value("false")
      .doc("With gradient_checkpointing: each block's saved input waits in host memory (pinned, copied "
           "asynchronously on a GPU) instead of on the device until backward recomputes the block; saves "
           "num_layers x tokens x dim values of device memory for two copies of them a step (docs/low-memory.md).");
}

bool activation_offload_from(const wanfw::Options& options) {
  if (!options.boolean("activation_offload")) return false;
  if (!options.boolean("gradient_checkpointing"))
    options.fail("activation_offload", "activation offload keeps checkpointed blocks' inputs on the host, but "
                                       "gradient_checkpointing is off",
                 "set gradient_checkpointing: true as well");
  return true;
}

wanfw::OptionSpec recompute_chunks_option() {
  return wanfw::option("recompute_chunks", T::Integer)
      .value("1")
      .doc("With gradient_checkpointing: each block runs and is recomputed in this many chunks of tokens, its "
           "self-attention over every token at once; the recomputed block holds its per-token activations (the "
           "feed-forward's hidden layer, projections, norms) for one chunk: about max(11, 8 + (24 x dim + 2 x "
           "ffn_dim) / (dim x chunks)) x dim values a token instead of 24 x dim + 2 x ffn_dim, for a second pass "
           "over the queries', keys' and values' projections (docs/low-memory.md). 1: whole blocks.");
}

std::int64_t recompute_chunks_from(const wanfw::Options& options) {
  const std::int64_t chunks = options.integer("recompute_chunks");
  if (chunks < 1)
    options.fail("recompute_chunks", fmt::format("{} chunks of tokens", chunks), "set 1 (whole blocks) or more");
  if (chunks > 1 && !options.boolean("gradient_checkpointing"))
    options.fail("recompute_chunks", "chunks of tokens serve a block recomputed in backward, but "
                                     "gradient_checkpointing is off",
                 "set gradient_checkpointing: true as well, or recompute_chunks: 1");
  return chunks;
}

void warn_chunks_beyond_tokens(const wanfw::Options& options, const wanfw::TrainingLayout& layout,
                               const std::array<std::int64_t, 3>& patch) {
  const std::int64_t chunks = options.integer("recompute_chunks");
  if (layout.latent.size() != 3 || chunks <= 1) return;
  std::int64_t tokens = 1;
  for (std::size_t i = 0; i < 3; ++i) tokens *= std::max<std::int64_t>(1, layout.latent[i] / patch[i]);
  tokens = (tokens + layout.sequence_parallel - 1) / std::max(1, layout.sequence_parallel);
  if (chunks > tokens)
    wanfw::log::warn(fmt::format("{}: {}.recompute_chunks: {} chunks, more than a rank holds tokens of the largest "
                                 "bucket ({}): each block recomputes in {} chunks of one token, which saves no more "
                                 "memory than fewer, longer ones",
                                 options.where("recompute_chunks").str(), options.section(), chunks, tokens, tokens));
}

void check_block_swap_needs(const wanfw::Options& options, const wanfw::TrainingLayout& layout) {
  if (layout.swapped_blocks > 0 && !options.boolean("gradient_checkpointing"))
    options.fail("gradient_checkpointing",
                 fmt::format("block swap streams {} block(s) through device slots, but gradient_checkpointing is off: "
                             "a block would keep its streamed weights for backward, where its slot holds another "
                             "block's", layout.swapped_blocks),
                 "set gradient_checkpointing: true (a checkpointed block keeps its inputs and recomputes), or remove "
                 "block_swap");
}

}  // namespace wan
