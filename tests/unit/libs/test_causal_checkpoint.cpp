// Gradient checkpointing of a causal DiT (wan/causal_attention.hpp): a checkpointed block recomputes
// under the block-causal mask, and a checkpointed rollout pass recomputes over the frames it found in
// the KV cache, which the later context passes have replaced by the time backward runs. Both give the
// plain backward's gradients. The tiny DiT with random weights.

#include <torch/torch.h>

#include "tiny_dit.hpp"
#include "wan/causal_attention.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

constexpr std::int64_t kCheckpointChunk = 2, kCheckpointChunks = 4;
constexpr std::int64_t kCheckpointFrames = kCheckpointChunk * kCheckpointChunks;

/// A rollout's latents: [1, in_dim, frames, 4, 4] (4 tokens a frame), clean and noisy, and a text context.
struct CheckpointVideo {
  torch::Tensor clean, noisy, context;
};

CheckpointVideo checkpoint_video(const wan::WanConfig& c) {
  torch::manual_seed(11);
  return {torch::randn({1, c.in_dim, kCheckpointFrames, 4, 4}), torch::randn({1, c.in_dim, kCheckpointFrames, 4, 4}),
          torch::randn({1, 5, c.text_dim})};
}

torch::Tensor frames_of(const torch::Tensor& x, std::int64_t first, std::int64_t count) {
  return x.narrow(2, first, count);
}

double chunk_t(std::int64_t k) { return 900.0 - 150.0 * static_cast<double>(k); }

double largest_relative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

// The recomputation runs the forward's operations on the same values; a parameter's gradient sums
// the chunks' contributions in another order (float32 ulps, 2^-24 relative), two orders below this.
constexpr double kCheckpointTolerance = 1e-5;

}  // namespace

TEST_CASE("a checkpointed causal forward recomputes its blocks under the mask: the gradients of the plain backward") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const CheckpointVideo v = checkpoint_video(dit->config());
  const wan::CausalLayout layout{kCheckpointChunk};
  const wan::CausalPass pass{&layout, nullptr, 0};
  const torch::Tensor t = torch::rand({1, kCheckpointFrames}) * 1000;
  const auto gradients = [&] {
    dit->zero_grad();
    dit->forward(v.noisy, t, v.context, {}, {}, &pass).pow(2).sum().backward();
    std::vector<torch::Tensor> out;
    for (const auto& p : dit->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  dit->train();
  const std::vector<torch::Tensor> plain = gradients();
  dit->set_gradient_checkpointing(true);
  const std::vector<torch::Tensor> recomputed = gradients();
  for (std::size_t i = 0; i < plain.size(); ++i)
    CHECK(largest_relative(recomputed[i], plain[i]) < kCheckpointTolerance);
  // Bidirectional attention in the recomputation would give other gradients.
  const torch::Tensor x = v.noisy.clone();
  dit->zero_grad();
  dit->forward(x, t.repeat_interleave(4, 1), v.context).pow(2).sum().backward();
  CHECK(largest_relative(dit->parameters().front().grad(), plain.front()) > 1e-3);
}

TEST_CASE("a checkpointed rollout pass recomputes over the frames it found in the cache: the plain gradients") {
  // Each chunk's noisy pass with a graph, then its clean context pass without, which replaces the
  // chunk's frames in the cache before backward runs: the recomputation must not read them.
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const CheckpointVideo v = checkpoint_video(dit->config());
  const wan::CausalLayout layout{kCheckpointChunk, 3 * kCheckpointChunk, 1};  // a window with a sink: frames let go too
  const auto gradients = [&] {
    dit->zero_grad();
    std::vector<torch::Tensor> outputs;
    {  // the cache, and the layout the passes name (its own), are gone before backward, as in a rollout
      wan::KvCache cache(layout, 2, 4);
      for (std::int64_t k = 0; k < kCheckpointChunks; ++k) {
        const wan::CausalPass pass{&cache.layout(), &cache, k * kCheckpointChunk};
        outputs.push_back(dit->forward(frames_of(v.noisy, k * kCheckpointChunk, kCheckpointChunk),
                                       torch::full({1, kCheckpointChunk}, chunk_t(k)), v.context, {}, {}, &pass));
        torch::NoGradGuard no_grad;
        dit->forward(frames_of(v.clean, k * kCheckpointChunk, kCheckpointChunk), torch::zeros({1, kCheckpointChunk}),
                     v.context, {}, {}, &pass);
      }
    }
    torch::cat(outputs, 2).pow(2).sum().backward();
    std::vector<torch::Tensor> out;
    for (const auto& p : dit->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  dit->train();
  const std::vector<torch::Tensor> plain = gradients();
  dit->set_gradient_checkpointing(true);
  const std::vector<torch::Tensor> recomputed = gradients();
  // The same operations on the same values; a parameter's gradient sums the chunks' contributions
  // in another order (float32 ulps).
  for (std::size_t i = 0; i < plain.size(); ++i) {
    CHECK(largest_relative(recomputed[i], plain[i]) < kCheckpointTolerance);
  }
}
