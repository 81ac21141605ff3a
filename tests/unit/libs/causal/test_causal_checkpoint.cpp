// Gradient checkpointing of a causal DiT (wan/causal_attention.hpp): a checkpointed block recomputes
// under the block-causal mask, and a checkpointed rollout pass recomputes over the frames it found in
// the KV cache, which the later context passes have replaced by the time backward runs, each whole
// or in chunks of tokens (recompute_chunks). All give the plain backward's gradients. The tiny DiT
// with random weights.

#include <torch/torch.h>

#include "causal_video.hpp"
#include "tiny_dit.hpp"
#include "wan/causal_attention.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw::testing::causal;

TEST_CASE("a checkpointed causal forward recomputes its blocks under the mask: the gradients of the plain backward") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  const wan::CausalLayout layout{kChunk};
  const wan::CausalPass pass{&layout, nullptr, 0};
  const torch::Tensor t = torch::rand({1, kFrames}) * 1000;
  const auto loss = [&] { return dit->forward(v.noisy, t, v.context, {}, {}, &pass).pow(2).sum(); };
  dit->train();
  const std::vector<torch::Tensor> plain = gradients(dit, loss);
  dit->set_gradient_checkpointing(true);
  for (const std::int64_t chunks : {1, 3}) {  // whole, or in 3 chunks of tokens that cut frames apart
    INFO("recompute_chunks " << chunks);
    dit->set_recompute_chunks(chunks);
    const std::vector<torch::Tensor> recomputed = gradients(dit, loss);
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(relative(recomputed[i], plain[i]) < kTolerance);
  }
  dit->set_recompute_chunks(1);
  // Bidirectional attention in the recomputation would give other gradients.
  const torch::Tensor x = v.noisy.clone();
  dit->zero_grad();
  dit->forward(x, t.repeat_interleave(4, 1), v.context).pow(2).sum().backward();
  CHECK(relative(dit->parameters().front().grad(), plain.front()) > 1e-3);
}

TEST_CASE("a checkpointed rollout pass recomputes over the frames it found in the cache: the plain gradients") {
  // Each chunk's noisy pass with a graph, then its clean context pass without, which replaces the
  // chunk's frames in the cache before backward runs: the recomputation must not read them.
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  const wan::CausalLayout layout{kChunk, 3 * kChunk, 1};  // a window with a sink: frames let go too
  const auto loss = [&] {
    std::vector<torch::Tensor> outputs;
    {  // the cache, and the layout the passes name (its own), are gone before backward, as in a rollout
      wan::KvCache cache(layout, 2, 4);
      for (std::int64_t k = 0; k < kChunks; ++k) {
        const wan::CausalPass pass{&cache.layout(), &cache, k * kChunk};
        outputs.push_back(dit->forward(frames(v.noisy, k * kChunk, kChunk), torch::full({1, kChunk}, noisy_t(k)),
                                       v.context, {}, {}, &pass));
        torch::NoGradGuard no_grad;
        dit->forward(frames(v.clean, k * kChunk, kChunk), torch::zeros({1, kChunk}), v.context, {}, {}, &pass);
      }
    }
    return torch::cat(outputs, 2).pow(2).sum();
  };
  dit->train();
  const std::vector<torch::Tensor> plain = gradients(dit, loss);
  dit->set_gradient_checkpointing(true);
  // The same operations on the same values; a parameter's gradient sums the chunks' contributions
  // in another order (float32 ulps). Recomputed whole, or in 3 chunks of a pass's 8 tokens.
  for (const std::int64_t chunks : {1, 3}) {
    INFO("recompute_chunks " << chunks);
    dit->set_recompute_chunks(chunks);
    const std::vector<torch::Tensor> recomputed = gradients(dit, loss);
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(relative(recomputed[i], plain[i]) < kTolerance);
  }
}
