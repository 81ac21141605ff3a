// Both A14B experts as one causal student (WanDenoiser with Expert::Both): a rollout takes each
// chunk's step with the expert of its level over that expert's own keys and values, and a made
// chunk's context pass goes into both experts' caches, so that either expert sees every earlier
// chunk. Against two single DiTs with a cache each. The tiny DiT with random weights.

#include <torch/torch.h>

#include "wan/causal_sampler.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/error.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

constexpr double kPairBoundary = 0.875;
constexpr std::uint64_t kPairSeed = 17;

/// The tiny expert pair, each expert's weights random and its own.
wan::WanDenoiser random_pair() {
  wan::WanDenoiser pair(wan::wan_preset("tiny"), wan::Expert::Both, kPairBoundary);
  torch::manual_seed(8);
  torch::NoGradGuard no_grad;
  for (auto& dit : pair.dits())
    for (auto& p : dit->parameters()) p.normal_(0.0, 0.2);
  return pair;
}

}  // namespace

TEST_CASE("an expert pair's rollout steps with the expert of each level and passes made chunks into both caches") {
  wan::WanDenoiser pair = random_pair();
  const torch::Tensor context = torch::randn({1, 5, pair.config().text_dim});
  const wan::CausalLayout layout{2};
  const wan::CausalSampling sampling{{1000, 900, 700}, 0, 3};  // two high-noise steps, then a low-noise one
  wan::KvCache cache = wan::rollout_cache(pair, layout, 4, 4);
  std::vector<std::size_t> experts;  // which expert each step ran: the level's
  const wan::CausalVelocity velocity = [&](const torch::Tensor& x, const torch::Tensor& t, const wan::CausalPass& p) {
    return pair.forward(x, t, context, {}, std::get<0>(t.max(1)) / 1000.0, {}, &p);
  };
  const torch::Tensor video = wan::causal_sample(velocity, cache, {1, 4, 4, 4}, sampling, kPairSeed, torch::kCPU);
  // The reference: each expert a DiT with a cache of its own; a step by the expert of its level, the
  // context pass through both.
  std::vector<wan::WanDiT> dits = pair.dits();
  REQUIRE(dits.size() == 2);
  std::vector<wan::KvCache> caches(2, wan::KvCache(layout, pair.config().num_layers, 4));
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> made;
  for (std::int64_t k = 0; k < 3; ++k) {
    const wan::CausalPass pass_high{&layout, &caches[0], 2 * k}, pass_low{&layout, &caches[1], 2 * k};
    torch::Tensor x = wan::chunk_noise(kPairSeed, k, 0, {1, 4, 2, 4, 4}), estimate;
    for (std::size_t j = 0; j < sampling.timesteps.size(); ++j) {
      const double t = sampling.timesteps[j];
      const bool high = t / 1000 >= kPairBoundary;
      const torch::Tensor v =
          dits[high ? 0 : 1]->forward(x, torch::full({1, 2}, t), context, {}, {}, high ? &pass_high : &pass_low);
      estimate = x - t / 1000 * v;
      if (j + 1 < sampling.timesteps.size()) {
        const double next = sampling.timesteps[j + 1] / 1000;
        x = (1 - next) * estimate + next * wan::chunk_noise(kPairSeed, k, static_cast<std::int64_t>(j) + 1, x.sizes());
      }
    }
    dits[0]->forward(estimate, torch::zeros({1, 2}), context, {}, {}, &pass_high);
    dits[1]->forward(estimate, torch::zeros({1, 2}), context, {}, {}, &pass_low);
    made.push_back(estimate);
  }
  CHECK(torch::equal(video, torch::cat(made, 2)));
  // Both experts' blocks hold every frame: block 0 of the high-noise expert, block 0 of the low-noise one.
  const std::vector<std::int64_t> every = {0, 1, 2, 3, 4, 5};
  CHECK(cache.frames(0) == every);
  CHECK(cache.frames(static_cast<std::size_t>(pair.config().num_layers)) == every);
  // Without the high-noise expert's context passes its later chunks see no earlier frame: another video.
  const wan::CausalVelocity low_context = [&](const torch::Tensor& x, const torch::Tensor& t,
                                              const wan::CausalPass& p) {
    if (!p.context) return velocity(x, t, p);
    wan::CausalPass low = p;
    low.context = false;
    return velocity(x, t.clamp_max(0), low);  // t = 0: the low-noise expert alone
  };
  const torch::Tensor one_cache =
      wan::causal_sample(low_context, cache, {1, 4, 4, 4}, sampling, kPairSeed, torch::kCPU);
  CHECK((one_cache - video).abs().max().item<double>() > 1e-3);
}

TEST_CASE("an expert pair's rollout step with samples on both sides of the boundary is refused") {
  wan::WanDenoiser pair = random_pair();
  const wan::CausalLayout layout{2};
  wan::KvCache cache = wan::rollout_cache(pair, layout, 4, 4);
  const wan::CausalPass pass{&layout, &cache, 0};
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({2, 4, 2, 4, 4}), t = torch::tensor({{950.0, 950.0}, {500.0, 500.0}});
  CHECK_THROWS_WITH_AS(pair.forward(x, t, torch::randn({2, 5, 32}), {}, std::get<0>(t.max(1)) / 1000.0, {}, &pass),
                       doctest::Contains("both sides of the experts' boundary"), wanfw::Error);
}
