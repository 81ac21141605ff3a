// The streaming sampler of a causal student (wan/causal_sampler.hpp): the warped few-step
// timesteps; a video made chunk by chunk with the KV cache equal to the same steps run with full
// block-causal forwards over every clean chunk before; a chunk final as soon as it is made, whatever
// follows, and handed over in order. The tiny DiT with random weights.

#include <torch/torch.h>

#include "tiny_dit.hpp"
#include "wan/causal_sampler.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

constexpr std::int64_t kSamplerChunk = 2;
constexpr std::uint64_t kSamplerSeed = 21;

struct Student {
  wan::WanDiT dit = wanfw::testing::random_tiny_dit();
  torch::Tensor context = torch::randn({1, 5, dit->config().text_dim});
  wan::CausalVelocity velocity() {
    return [this](const torch::Tensor& x, const torch::Tensor& t, const wan::CausalPass& pass) {
      return dit->forward(x, t, context, {}, {}, &pass);
    };
  }
  /// A rollout's noise: the sampler's own draws for chunks of [1, 4, kSamplerChunk, 4, 4].
  static wan::ChunkNoise noise() {
    return [](std::int64_t k, std::int64_t j) {
      return wan::chunk_noise(kSamplerSeed, k, j, {1, 4, kSamplerChunk, 4, 4});
    };
  }
};

}  // namespace

TEST_CASE("the few-step student's timesteps are the steps warped by the schedule's shift") {
  const std::vector<double> warped = wan::warped_timesteps({1000, 750, 500, 250}, 5.0);
  REQUIRE(warped.size() == 4);
  CHECK(warped[0] == doctest::Approx(1000.0).epsilon(1e-12));
  CHECK(warped[1] == doctest::Approx(937.5).epsilon(1e-12));
  CHECK(warped[2] == doctest::Approx(2500.0 / 3).epsilon(1e-12));
  CHECK(warped[3] == doctest::Approx(625.0).epsilon(1e-12));
}

TEST_CASE("a video sampled chunk by chunk with the cache equals the same steps over full block-causal forwards") {
  Student student;
  const wan::CausalLayout layout{kSamplerChunk};
  wan::KvCache cache(layout, 2, 4);
  const wan::CausalSampling sampling{{1000, 800, 500}, 0, 3};
  const std::vector<std::int64_t> frame_shape = {1, 4, 4, 4};
  const torch::Tensor video =
      wan::causal_sample(student.velocity(), cache, frame_shape, sampling, kSamplerSeed, torch::kCPU);
  CHECK(video.sizes().vec() == std::vector<std::int64_t>{1, 4, 3 * kSamplerChunk, 4, 4});
  // The reference: each step of chunk k a full forward over [the chunks made before, clean | the chunk].
  torch::NoGradGuard no_grad;
  const wan::CausalPass full{&layout, nullptr, 0};
  std::vector<torch::Tensor> made;
  for (std::int64_t k = 0; k < 3; ++k) {
    torch::Tensor x = wan::chunk_noise(kSamplerSeed, k, 0, {1, 4, kSamplerChunk, 4, 4}), estimate;
    for (std::size_t j = 0; j < sampling.timesteps.size(); ++j) {
      const double t = sampling.timesteps[j], s = t / 1000;
      torch::Tensor levels = torch::zeros({1, (k + 1) * kSamplerChunk});
      levels.narrow(1, k * kSamplerChunk, kSamplerChunk).fill_(t);
      std::vector<torch::Tensor> frames = made;
      frames.push_back(x);
      const torch::Tensor v = student.dit->forward(torch::cat(frames, 2), levels, student.context, {}, {}, &full);
      estimate = x - s * v.narrow(2, k * kSamplerChunk, kSamplerChunk);
      if (j + 1 < sampling.timesteps.size()) {
        const double next = sampling.timesteps[j + 1] / 1000;
        const auto step = static_cast<std::int64_t>(j) + 1;
        x = (1 - next) * estimate + next * wan::chunk_noise(kSamplerSeed, k, step, x.sizes());
      }
    }
    made.push_back(estimate);
  }
  const torch::Tensor reference = torch::cat(made, 2);
  // As test_causal_dit's rollout: the same terms summed in another order in attention.
  CHECK(((video - reference).abs().max() / reference.abs().max()).item<double>() < 1e-5);
}

TEST_CASE("a sampled chunk is final as soon as it is made: more chunks after it never change it") {
  Student student;
  const wan::CausalLayout layout{kSamplerChunk};
  wan::KvCache cache(layout, 2, 4);
  const std::vector<std::int64_t> frame_shape = {1, 4, 4, 4};
  std::vector<std::int64_t> order;
  std::vector<torch::Tensor> handed;
  const auto hand_over = [&](std::int64_t k, const torch::Tensor& chunk) {
    order.push_back(k);
    handed.push_back(chunk.clone());
  };
  const torch::Tensor three = wan::causal_sample(student.velocity(), cache, frame_shape, {{1000, 600}, 0, 3},
                                                 kSamplerSeed, torch::kCPU, hand_over);
  CHECK(order == std::vector<std::int64_t>{0, 1, 2});
  CHECK(torch::equal(torch::cat(handed, 2), three));
  const torch::Tensor five =
      wan::causal_sample(student.velocity(), cache, frame_shape, {{1000, 600}, 0, 5}, kSamplerSeed, torch::kCPU);
  CHECK(torch::equal(five.narrow(2, 0, 3 * kSamplerChunk), three));
  CHECK(cache.end_frame() == 5 * kSamplerChunk);  // the cache was cleared and refilled for the new video
}

TEST_CASE("a self-rollout exits each chunk at its exit step, the sampler's chunk at that step, with a graph") {
  Student student;
  const wan::CausalLayout layout{kSamplerChunk};
  wan::KvCache cache(layout, 2, 4);
  const wan::ChunkNoise noise = Student::noise();
  const wan::CausalSampling four{{1000, 937.5, 833.3, 625}, 0, 3};
  // Exit at step 2: the sampler stopped after its first 3 steps makes the same video.
  const torch::Tensor rolled = wan::causal_rollout(student.velocity(), cache, noise, four, 2);
  CHECK(rolled.requires_grad());
  const torch::Tensor sampled = wan::causal_sample(student.velocity(), cache, {1, 4, 4, 4},
                                                   {{1000, 937.5, 833.3}, 0, 3}, kSamplerSeed, torch::kCPU);
  CHECK(torch::equal(rolled.detach(), sampled));
}

TEST_CASE("a self-rollout's gradient goes through each chunk's exit forward alone") {
  Student student;
  const wan::CausalLayout layout{kSamplerChunk};
  wan::KvCache cache(layout, 2, 4);
  const wan::ChunkNoise noise = Student::noise();
  std::vector<bool> with_graph;  // each pass: whether autograd records it
  const wan::CausalVelocity recorded = [&](const torch::Tensor& x, const torch::Tensor& t,
                                           const wan::CausalPass& pass) {
    with_graph.push_back(torch::GradMode::is_enabled());
    return student.velocity()(x, t, pass);
  };
  const torch::Tensor video = wan::causal_rollout(recorded, cache, noise, {{1000, 900, 700, 500}, 0, 3}, 2);
  // Per chunk: steps 0 and 1 without a graph, the exit step 2 with one, the context pass without.
  const std::vector<bool> chunk = {false, false, true, false};
  std::vector<bool> expected;
  for (int k = 0; k < 3; ++k) expected.insert(expected.end(), chunk.begin(), chunk.end());
  CHECK(with_graph == expected);
  // The last chunk's gradient reaches the weights only through its own exit forward: the same
  // gradient as that one forward over the cache the earlier chunks left.
  video.narrow(2, 2 * kSamplerChunk, kSamplerChunk).pow(2).sum().backward();
  std::vector<torch::Tensor> through_rollout;
  for (const auto& p : student.dit->parameters()) through_rollout.push_back(p.grad().clone());
  student.dit->zero_grad();
  torch::Tensor x;
  {
    torch::NoGradGuard no_grad;  // chunk 2's input at its exit step, and the cache before it
    (void)wan::causal_rollout(student.velocity(), cache, noise, {{1000, 900, 700, 500}, 0, 2}, 2);
    x = noise(2, 0);
    for (const auto& [t, next, j] : {std::tuple{1000.0, 0.9, 1}, {900.0, 0.7, 2}}) {
      const wan::CausalPass pass{&layout, &cache, 2 * kSamplerChunk};
      const torch::Tensor estimate = x - t / 1000 * student.velocity()(x, torch::full({1, kSamplerChunk}, t), pass);
      x = (1 - next) * estimate + next * noise(2, j);
    }
  }
  const wan::CausalPass exit{&layout, &cache, 2 * kSamplerChunk};
  (x - 0.7 * student.velocity()(x, torch::full({1, kSamplerChunk}, 700.0), exit)).pow(2).sum().backward();
  const auto parameters = student.dit->parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i)
    CHECK(torch::allclose(parameters[i].grad(), through_rollout[i], 1e-5, 1e-6));
}

TEST_CASE("a rollout's passes without autograd make the text's keys and values once a block and reuse them") {
  const wan::CausalLayout layout{kSamplerChunk};
  wan::KvCache cache(layout, 2, 4);
  int made = 0;
  const auto make = [&] {
    ++made;
    return std::pair{torch::ones({1, 5, 2, 24}), torch::zeros({1, 5, 2, 24})};
  };
  const torch::Tensor text = torch::randn({1, 5, 48});
  {
    torch::NoGradGuard no_grad;
    cache.context_keys_values(0, text, make);
    cache.context_keys_values(0, text.clone(), make);  // the same text, embedded anew
    CHECK(made == 1);
    cache.context_keys_values(0, text + 1, make);  // another text
    CHECK(made == 2);
  }
  cache.context_keys_values(0, text + 1, make);  // with autograd: its own, for the projections' gradient
  CHECK(made == 3);
  // The sampler's passes reuse them: the video equal to full forwards' (the test above) proves them right.
}
