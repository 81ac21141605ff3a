// The Wan DiT as a causal student (wan/causal_attention.hpp): which keys a query sees; a chunk's
// output independent of the chunks after it; a chunk-by-chunk rollout with the KV cache, and the
// teacher-forcing layout, equal to the full block-causal forward on [earlier chunks clean | this
// chunk noisy], with every frame's timestep its own and RoPE at absolute frames; repeated passes
// over a chunk replacing its frames;
// attention a chunk at a time, with a rolling window and sinks, equal to the dense mask it stands
// for; the gradient reaching only
// a pass's own forward (checkpointed passes: test_causal_checkpoint.cpp). The tiny DiT with random
// weights.

#include <torch/torch.h>

#include "causal_video.hpp"
#include "tiny_dit.hpp"
#include "wan/causal_attention.hpp"
#include "wanfw/error.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw::testing::causal;

namespace {

/// The full block-causal forward on [chunks < k clean at t = 0 | chunk k noisy at its t]: chunk k's output.
torch::Tensor reference(wan::WanDiT& dit, const wan::CausalLayout& layout, const Video& v, std::int64_t k) {
  const std::int64_t end = (k + 1) * kChunk;
  const torch::Tensor x = torch::cat({frames(v.clean, 0, k * kChunk), frames(v.noisy, k * kChunk, kChunk)}, 2);
  torch::Tensor t = torch::zeros({1, end});
  t.narrow(1, k * kChunk, kChunk).fill_(noisy_t(k));
  const wan::CausalPass pass{&layout, nullptr, 0};
  return frames(dit->forward(x, t, v.context, {}, {}, &pass), k * kChunk, kChunk);
}

/// The rollout: each chunk's noisy pass (its output kept), then its clean context pass at t = 0.
std::vector<torch::Tensor> rollout(wan::WanDiT& dit, wan::KvCache& cache, const Video& v, int noisy_passes = 1) {
  std::vector<torch::Tensor> out;
  for (std::int64_t k = 0; k < kChunks; ++k) {
    const wan::CausalPass pass{&cache.layout(), &cache, k * kChunk};
    for (int n = 0; n < noisy_passes; ++n)
      out.push_back(dit->forward(frames(v.noisy, k * kChunk, kChunk), torch::full({1, kChunk}, noisy_t(k)), v.context,
                                 {}, {}, &pass));
    if (noisy_passes > 1) out.erase(out.end() - noisy_passes, out.end() - 1);
    dit->forward(frames(v.clean, k * kChunk, kChunk), torch::zeros({1, kChunk}), v.context, {}, {}, &pass);
  }
  return out;
}

/// The rollout, each chunk checked against the full block-causal forward on its context.
std::vector<torch::Tensor> checked_rollout(wan::WanDiT& dit, wan::KvCache& cache, const Video& v) {
  const std::vector<torch::Tensor> chunks = rollout(dit, cache, v);
  for (std::int64_t k = 0; k < kChunks; ++k) {
    INFO("chunk " << k);
    CHECK(relative(chunks[static_cast<std::size_t>(k)], reference(dit, cache.layout(), v, k)) < kTolerance);
  }
  return chunks;
}

/// Frames 0 to kFrames - 1: what a cache without a window holds after the rollout.
std::vector<std::int64_t> every_frame() {
  std::vector<std::int64_t> out;
  for (std::int64_t f = 0; f < kFrames; ++f) out.push_back(f);
  return out;
}

}  // namespace

TEST_CASE("a causal query sees its chunk and the chunks before it, and with a window its sinks and last frames") {
  const wan::CausalLayout global{3, 0, 0};
  CHECK(global.sees(4, 5));  // same chunk [3, 6): bidirectional
  CHECK(global.sees(4, 0));
  CHECK_FALSE(global.sees(4, 6));           // the next chunk
  const wan::CausalLayout window{3, 9, 3};  // 3 sinks and the 6 frames before the chunk's end
  CHECK(window.sees(13, 0));                // frame 13's chunk [12, 15): a sink
  CHECK_FALSE(window.sees(13, 8));          // before 15 - 6 = 9, not a sink
  CHECK(window.sees(13, 9));
  CHECK(window.sees(13, 14));
  const torch::Tensor mask = window.mask(wan::frame_range(12, 3), wan::frame_range(0, 15), 2, torch::kCPU);
  CHECK(mask.sizes() == torch::IntArrayRef{6, 30});
  CHECK(mask.index({0, torch::indexing::Slice(0, 6)}).all().item<bool>());                                // sinks 0-2
  CHECK_FALSE(mask.index({0, torch::indexing::Slice(6, 18)}).any().item<bool>());                         // frames 3-8
  CHECK(mask.index({0, torch::indexing::Slice(18, 30)}).all().item<bool>());                              // frames 9-14
  CHECK(global.mask(wan::frame_range(3, 3), wan::frame_range(0, 6), 2, torch::kCPU).all().item<bool>());  // all seen
  // Teacher forcing: a noisy chunk sees its own noisy frames and the clean frames of earlier chunks.
  CHECK(global.sees(wan::FrameTag{4, true}, wan::FrameTag{5, true}));
  CHECK(global.sees(wan::FrameTag{4, true}, wan::FrameTag{2, false}));
  CHECK_FALSE(global.sees(wan::FrameTag{4, true}, wan::FrameTag{4, false}));  // its own clean copy
  CHECK_FALSE(global.sees(wan::FrameTag{4, true}, wan::FrameTag{2, true}));   // an earlier noisy chunk
  CHECK_FALSE(global.sees(wan::FrameTag{4, false}, wan::FrameTag{4, true}));  // clean never sees noisy
  CHECK_THROWS_AS((wan::CausalLayout{3, 4, 2}.validate()), wanfw::Error);     // 2 rolling frames < a chunk
}

TEST_CASE("attention a query chunk at a time over the keys it sees equals attention under the dense mask") {
  // The window with a sink and the teacher-forcing layout, each run of queries over its own keys,
  // against one attention over every key with the layout's mask.
  torch::manual_seed(5);
  const auto dense = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask) {
    const std::optional<torch::Tensor> attn_mask = mask.defined() ? std::optional(mask) : std::nullopt;
    return at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask)
        .transpose(1, 2);
  };
  const wan::Attend attend = [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return dense(q, k, v, {});
  };
  const std::int64_t per_frame = 3;
  for (const auto& [layout, frames] : {std::pair{wan::CausalLayout{2, 5, 1}, wan::frame_range(0, 8)},
                                       std::pair{wan::CausalLayout{2}, wan::teacher_forcing_frames(6)},
                                       std::pair{wan::CausalLayout{2, 5, 1}, wan::teacher_forcing_frames(6)}}) {
    const std::int64_t tokens = std::ssize(frames) * per_frame;
    const torch::Tensor q = torch::randn({2, tokens, 2, 8}), k = torch::randn({2, tokens, 2, 8}),
                        v = torch::randn({2, tokens, 2, 8});
    const torch::Tensor chunked = wan::causal_attention(layout, q, k, v, frames, frames, per_frame, attend);
    const torch::Tensor masked = dense(q, k, v, layout.mask(frames, frames, per_frame, torch::kCPU));
    CHECK(relative(chunked, masked) < 1e-6);  // the same terms, summed in another order
  }
}

TEST_CASE("in a causal forward the chunks after a chunk never change its output") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  const wan::CausalLayout layout{kChunk};
  const wan::CausalPass pass{&layout, nullptr, 0};
  const torch::Tensor t = torch::rand({1, kFrames}) * 1000;
  torch::NoGradGuard no_grad;
  const torch::Tensor out = dit->forward(v.noisy, t, v.context, {}, {}, &pass);
  torch::Tensor later = v.noisy.clone();
  frames(later, 2 * kChunk, 2 * kChunk).normal_();  // chunks 2 and 3 changed
  const torch::Tensor again = dit->forward(later, t, v.context, {}, {}, &pass);
  CHECK(torch::equal(frames(again, 0, 2 * kChunk), frames(out, 0, 2 * kChunk)));
  CHECK_FALSE(torch::equal(frames(again, 2 * kChunk, 2 * kChunk), frames(out, 2 * kChunk, 2 * kChunk)));
  // Bidirectional attention would have changed them: the mask is what keeps them.
  const torch::Tensor bidirectional = dit->forward(v.noisy, t.repeat_interleave(4, 1), v.context);
  CHECK_FALSE(torch::equal(frames(dit->forward(later, t.repeat_interleave(4, 1), v.context), 0, kChunk),
                           frames(bidirectional, 0, kChunk)));
}

TEST_CASE("a chunk-by-chunk rollout with the KV cache equals the full block-causal forward on its context") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  const wan::CausalLayout layout{kChunk};
  wan::KvCache cache(layout, 2, 4);
  torch::NoGradGuard no_grad;
  (void)checked_rollout(dit, cache, v);
  CHECK(cache.frames(0) == every_frame());
  CHECK(cache.end_frame() == kFrames);
}

TEST_CASE("the teacher-forcing layout gives each noisy chunk the output of the full forward on its clean context") {
  // [a clean copy | a noisy copy] of every frame in one forward: noisy chunk k over the clean chunks
  // before it, as the rollout's chunk k over its cache.
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  const wan::CausalLayout layout{kChunk};
  torch::Tensor t = torch::zeros({1, 2 * kFrames});
  for (std::int64_t k = 0; k < kChunks; ++k) t.narrow(1, kFrames + k * kChunk, kChunk).fill_(noisy_t(k));
  const wan::CausalPass pass{&layout, nullptr, 0, true};
  torch::NoGradGuard no_grad;
  const torch::Tensor out = dit->forward(torch::cat({v.clean, v.noisy}, 2), t, v.context, {}, {}, &pass);
  for (std::int64_t k = 0; k < kChunks; ++k) {
    INFO("chunk " << k);
    CHECK(relative(frames(out, kFrames + k * kChunk, kChunk), reference(dit, layout, v, k)) < kTolerance);
  }
  // The clean copy is the block-causal forward of the clean frames at t = 0.
  const wan::CausalPass clean{&layout, nullptr, 0};
  const torch::Tensor alone = dit->forward(v.clean, torch::zeros({1, kFrames}), v.context, {}, {}, &clean);
  CHECK(relative(frames(out, 0, kFrames), alone) < kTolerance);
  const wan::CausalPass odd{&layout, nullptr, 0, true};
  CHECK_THROWS_AS(dit->forward(frames(v.noisy, 0, 3), torch::zeros({1, 3}), v.context, {}, {}, &odd), wanfw::Error);
}

TEST_CASE("repeated passes over a chunk replace its frames in the cache: the last pass is what later chunks see") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  const wan::CausalLayout layout{kChunk};
  wan::KvCache once(layout, 2, 4), four_times(layout, 2, 4);
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> a = rollout(dit, once, v), b = rollout(dit, four_times, v, 4);
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) CHECK(torch::equal(a[k], b[k]));
  CHECK(four_times.frames(1) == every_frame());  // one entry a frame, not four
}

TEST_CASE("a rolling window with attention sinks equals the dense mask it stands for") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  const wan::CausalLayout layout{kChunk, 5, 1};  // 1 sink frame and the 4 frames before a chunk's end
  wan::KvCache cache(layout, 2, 4);
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> chunks = checked_rollout(dit, cache, v);
  // After the last chunk [6, 8): the sink and the 4 frames before its end; frames 1 to 3 let go.
  CHECK(cache.frames(0) == std::vector<std::int64_t>{0, 4, 5, 6, 7});
  // Without the window the last chunk sees every earlier frame: a different output.
  CHECK(relative(chunks.back(), reference(dit, wan::CausalLayout{kChunk}, v, kChunks - 1)) > 1e-3);
}

TEST_CASE("a rollout's gradient reaches only the pass it comes from, not the earlier chunks' passes") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  const wan::CausalLayout layout{kChunk};
  wan::KvCache cache(layout, 2, 4);
  const torch::Tensor first = frames(v.noisy, 0, kChunk).clone().requires_grad_(true);
  const torch::Tensor second = frames(v.noisy, kChunk, kChunk).clone().requires_grad_(true);
  const wan::CausalPass pass0{&layout, &cache, 0}, pass1{&layout, &cache, kChunk};
  const torch::Tensor out0 = dit->forward(first, torch::full({1, kChunk}, 800.0), v.context, {}, {}, &pass0);
  const torch::Tensor out1 = dit->forward(second, torch::full({1, kChunk}, 600.0), v.context, {}, {}, &pass1);
  out1.pow(2).sum().backward();
  CHECK(second.grad().defined());
  CHECK(second.grad().abs().sum().item<double>() > 0);
  CHECK_FALSE(first.grad().defined());  // chunk 1 attended to chunk 0's cached keys, values only
  (void)out0;
}

TEST_CASE("a causal pass at frames beyond RoPE's table is refused, naming the position") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  const wan::CausalLayout layout{kChunk};
  const wan::CausalPass last{&layout, nullptr, dit->config().rope_max_positions - kChunk};
  const wan::CausalPass beyond{&layout, nullptr, dit->config().rope_max_positions - 1};
  torch::NoGradGuard no_grad;
  const torch::Tensor x = frames(v.noisy, 0, kChunk), t = torch::zeros({1, kChunk});
  CHECK_NOTHROW(dit->forward(x, t, v.context, {}, {}, &last));
  CHECK_THROWS_WITH_AS(dit->forward(x, t, v.context, {}, {}, &beyond), doctest::Contains("beyond RoPE's 1024"),
                       wanfw::Error);
}
