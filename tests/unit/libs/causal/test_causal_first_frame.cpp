// The causal layout of i2v (CausalLayout::independent_first_frame): latent frame 0 a chunk of its own,
// then chunks of N; a rollout over it with the KV cache equal to the full block-causal forward and to
// the teacher-forcing layout; and the streaming sampler given that first frame (an image) continuing
// the video exactly as it continues its own first chunk. The tiny DiT with random weights.

#include <torch/torch.h>

#include "causal_video.hpp"
#include "tiny_dit.hpp"
#include "wan/causal_sampler.hpp"
#include "wanfw/error.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw::testing::causal;

namespace {

constexpr std::int64_t kLeadChunk = 2, kLeadChunks = 3, kLeadFrames = 1 + kLeadChunk * (kLeadChunks - 1);
constexpr std::uint64_t kLeadSeed = 33;

const wan::CausalLayout kLead{kLeadChunk, 0, 0, true};

/// Chunk k's output of the full block-causal forward on [chunks < k clean at t = 0 | chunk k noisy].
torch::Tensor lead_reference(wan::WanDiT& dit, const Video& v, std::int64_t k) {
  const std::int64_t first = kLead.chunk_first(k), count = kLead.chunk_frames(k);
  const torch::Tensor x = torch::cat({frames(v.clean, 0, first), frames(v.noisy, first, count)}, 2);
  torch::Tensor t = torch::zeros({1, first + count});
  t.narrow(1, first, count).fill_(noisy_t(k));
  const wan::CausalPass pass{&kLead, nullptr, 0};
  return frames(dit->forward(x, t, v.context, {}, {}, &pass), first, count);
}

wan::CausalVelocity velocity_of(wan::WanDiT& dit, const torch::Tensor& context) {
  return [&dit, context](const torch::Tensor& x, const torch::Tensor& t, const wan::CausalPass& pass) {
    return dit->forward(x, t, context, {}, {}, &pass);
  };
}

}  // namespace

TEST_CASE("with an independent first frame, frame 0 is a chunk of its own and N frames follow in each chunk") {
  CHECK(kLead.chunks(7) == 4);  // [0] [1, 2] [3, 4] [5, 6]
  CHECK(kLead.cuts(1));
  CHECK_FALSE(kLead.cuts(6));
  CHECK(wan::CausalLayout{kLeadChunk}.chunks(7) == 0);
  CHECK(kLead.chunk_first(2) == 3);
  CHECK(kLead.chunk_frames(0) == 1);
  CHECK(kLead.chunk_frames(2) == kLeadChunk);
  CHECK(kLead.chunk_start(4) == 3);
  CHECK(kLead.chunk_end(4) == 5);
  CHECK(kLead.sees(0, 0));
  CHECK_FALSE(kLead.sees(0, 1));  // the image sees itself alone
  CHECK(kLead.sees(1, 2));        // chunk [1, 3): bidirectional
  CHECK(kLead.sees(2, 0));
  CHECK_FALSE(kLead.sees(2, 3));
  CHECK(torch::equal(kLead.per_frame(torch::tensor({{7, 8, 9}})), torch::tensor({{7, 8, 8, 9, 9}})));
  // Teacher forcing: noisy chunk [1, 3) sees its own noisy frames and the clean image, not its clean copy.
  CHECK(kLead.sees(wan::FrameTag{1, true}, wan::FrameTag{0, false}));
  CHECK(kLead.sees(wan::FrameTag{1, true}, wan::FrameTag{2, true}));
  CHECK_FALSE(kLead.sees(wan::FrameTag{1, true}, wan::FrameTag{1, false}));
  CHECK_FALSE(kLead.sees(wan::FrameTag{0, true}, wan::FrameTag{0, false}));
}

TEST_CASE(
    "with an independent first frame, a rollout and the teacher-forcing layout equal full block-causal forwards") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const Video v = video(dit->config());
  wan::KvCache cache(kLead, 2, 4);
  torch::NoGradGuard no_grad;
  torch::Tensor t = torch::zeros({1, 2 * kLeadFrames});
  for (std::int64_t k = 0; k < kLeadChunks; ++k) {
    INFO("chunk " << k);
    const std::int64_t first = kLead.chunk_first(k), count = kLead.chunk_frames(k);
    const wan::CausalPass pass{&kLead, &cache, first};
    const torch::Tensor out =
        dit->forward(frames(v.noisy, first, count), torch::full({1, count}, noisy_t(k)), v.context, {}, {}, &pass);
    dit->forward(frames(v.clean, first, count), torch::zeros({1, count}), v.context, {}, {}, &pass);
    CHECK(relative(out, lead_reference(dit, v, k)) < kTolerance);
    t.narrow(1, kLeadFrames + first, count).fill_(noisy_t(k));
  }
  CHECK(cache.end_frame() == kLeadFrames);
  const wan::CausalPass teacher_forcing{&kLead, nullptr, 0, true};
  const torch::Tensor both = torch::cat({frames(v.clean, 0, kLeadFrames), frames(v.noisy, 0, kLeadFrames)}, 2);
  const torch::Tensor out = dit->forward(both, t, v.context, {}, {}, &teacher_forcing);
  for (std::int64_t k = 0; k < kLeadChunks; ++k) {
    INFO("teacher forcing, chunk " << k);
    CHECK(relative(frames(out, kLeadFrames + kLead.chunk_first(k), kLead.chunk_frames(k)), lead_reference(dit, v, k)) <
          kTolerance);
  }
}

TEST_CASE("a given first frame continues the video exactly as the sampler's own first chunk does") {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  const torch::Tensor context = torch::randn({1, 5, dit->config().text_dim});
  wan::KvCache cache(kLead, 2, 4);
  const std::vector<std::int64_t> frame = {1, 4, 4, 4};
  wan::CausalSampling sampling{{1000, 700, 400}, 0, kLeadChunks};
  const torch::Tensor made =
      wan::causal_sample(velocity_of(dit, context), cache, frame, sampling, kLeadSeed, torch::kCPU);
  CHECK(made.size(2) == kLeadFrames);
  // Given the frame the sampler made first: the same video, bit for bit, and handed over in order.
  sampling.initial = made.narrow(2, 0, 1).clone();
  std::vector<std::int64_t> order;
  const torch::Tensor continued =
      wan::causal_sample(velocity_of(dit, context), cache, frame, sampling, kLeadSeed, torch::kCPU,
                         [&](std::int64_t k, const torch::Tensor&) { order.push_back(k); });
  CHECK(torch::equal(continued, made));
  CHECK(order == std::vector<std::int64_t>{0, 1, 2});
  // Another image: it is the video's first frame as given, and the chunks after it follow from it.
  sampling.initial = torch::randn({1, 4, 1, 4, 4});
  const torch::Tensor other =
      wan::causal_sample(velocity_of(dit, context), cache, frame, sampling, kLeadSeed, torch::kCPU);
  CHECK(torch::equal(other.narrow(2, 0, 1), sampling.initial));
  CHECK((other.narrow(2, 1, kLeadFrames - 1) - made.narrow(2, 1, kLeadFrames - 1)).abs().max().item<double>() > 1e-3);
  // Frames that are not whole chunks are refused.
  sampling.initial = made.narrow(2, 0, 2).clone();
  CHECK_THROWS_WITH_AS(wan::causal_sample(velocity_of(dit, context), cache, frame, sampling, kLeadSeed, torch::kCPU),
                       doctest::Contains("not whole chunks"), wanfw::Error);
}
