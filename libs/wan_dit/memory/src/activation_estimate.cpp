// What a training step computes with, in the one estimate (estimator.hpp): the parameters a sharded
// step gathers, the activations by the checkpointing options, and the fp8 products' copies.

#include <algorithm>

#include <fmt/format.h>

#include "estimator.hpp"

namespace wan::estimate {

BlockActivations block_activations(const WanConfig& c, double tokens, double a, std::int64_t chunks, bool split) {
  const double layers = static_cast<double>(c.num_layers + std::ssize(c.vace_layers));  // VACE blocks are blocks
  return {tokens * static_cast<double>(c.dim) * a, recomputed_block_bytes(c, tokens, a, chunks, split),
          layers * recomputed_block_bytes(c, tokens, a, 1, split), layers};
}

double tokens_of(const WanConfig& c, const std::vector<std::int64_t>& latent) {
  const auto& p = c.patch;
  return static_cast<double>((latent[0] / p[0]) * (latent[1] / p[1]) * (latent[2] / p[2]));
}

void Estimator::gathered() {
  const double gathered = (2 * w_.block_values + w_.rest_values) * compute_bytes();
  device(whole_ ? "gathered parameters (two blocks and the rest) and a block's full gradient"
                : "gathered parameters (two blocks and the rest)",
         gathered + (whole_ ? (w_.block_values + w_.rest_values) * compute_bytes() : 0.0));
}

void Estimator::activations() {
  const double tokens = tokens_of(c_, layout_.latent);
  const double per_rank = tokens * static_cast<double>(layout_.batch_size) / layout_.sequence_parallel;
  const double a = compute_bytes();
  e_.activations = fmt::format("latents {}x{}x{}: {} tokens x batch {}{}", layout_.latent[0], layout_.latent[1],
                               layout_.latent[2], with_thousands(static_cast<std::int64_t>(tokens)),
                               layout_.batch_size,
                               layout_.sequence_parallel > 1 ? fmt::format(", 1/{} a GPU", layout_.sequence_parallel)
                                                             : "");
  const std::int64_t chunks = s_.checkpointing ? s_.chunks : 1;
  const bool split = layout_.sequence_parallel > 1;
  BlockActivations act = block_activations(c_, per_rank, a, chunks, split);
  for (const auto& other : {run_.critic, run_.held_graph})
    if (other && block_activations(*other, per_rank, a, chunks, split).most() > act.most())
      act = block_activations(*other, per_rank, a, chunks, split);
  const int layers = static_cast<int>(act.layers);
  const std::string in_chunks = chunks > 1 ? fmt::format(" in {} chunks of tokens", chunks) : std::string();
  if (!s_.checkpointing) {
    device("activations of every block, kept for backward", act.all);
  } else if (!s_.offload) {
    device(fmt::format("{} checkpointed block inputs", layers), act.layers * act.input);
    device("one block recomputed" + in_chunks, act.recompute);
  } else {
    device("one block's input back from the host, and the block recomputed" + in_chunks, act.input + act.recompute);
    host(fmt::format("{} checkpointed block inputs (pinned, each rounded up to a power of two)", layers),
         act.layers * power_of_two(act.input));
  }
  if (run_.task == Task::TI2V) device("the per-token time embedding (ti2v)", 7 * act.input);
  if (c_.has_vace()) device("the VACE branch's embedded context and a hint", 2 * act.input);
}

void Estimator::dequantized() {
  std::int64_t largest = std::max(c_.ffn_dim * c_.dim, c_.dim * c_.dim);
  if (run_.critic)
    largest = std::max({largest, run_.critic->ffn_dim * run_.critic->dim, run_.critic->dim * run_.critic->dim});
  device("dequantized copies of the largest Linear weight (fp8)", 2 * static_cast<double>(largest) * (4 + value_));
}

}  // namespace wan::estimate
