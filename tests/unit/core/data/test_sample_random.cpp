// Per-sample random streams: what a sample draws depends on the sample, never on the batch,
// rank or replica that holds it.

#include <ATen/ATen.h>

#include "data/data_loader.hpp"
#include "synthetic/synthetic_dataset.hpp"
#include "wanfw/data.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

Batch batch_of(std::vector<std::int64_t> ids, std::int64_t epoch = 0, std::uint64_t seed = 7) {
  Batch batch;
  batch.size = static_cast<std::int64_t>(ids.size());
  batch.fields["x"] = at::zeros({batch.size, 2});
  batch.sample_ids = std::move(ids);
  batch.epoch = epoch;
  batch.seed = seed;
  return batch;
}

}  // namespace

TEST_CASE("a sample draws the same numbers whatever batch holds it and wherever it sits") {
  const at::Tensor together = sample_randn(batch_of({3, 8, 5, 1}), "noise", {2, 3});
  const at::Tensor alone = sample_randn(batch_of({8}), "noise", {2, 3});
  const at::Tensor reordered = sample_randn(batch_of({5, 8}), "noise", {2, 3});
  CHECK((together.sizes() == at::IntArrayRef({4, 2, 3})));
  CHECK(at::equal(together[1], alone[0]));
  CHECK(at::equal(together[1], reordered[1]));
  CHECK(at::equal(together[2], reordered[0]));
}

TEST_CASE("the draws differ between samples, epochs, streams and seeds") {
  const at::Tensor base = sample_rand(batch_of({4}), "timestep", {16});
  CHECK_FALSE(at::equal(base, sample_rand(batch_of({5}), "timestep", {16})));
  CHECK_FALSE(at::equal(base, sample_rand(batch_of({4}, /*epoch=*/1), "timestep", {16})));
  CHECK_FALSE(at::equal(base, sample_rand(batch_of({4}), "noise", {16})));
  CHECK_FALSE(at::equal(base, sample_rand(batch_of({4}, 0, /*seed=*/8), "timestep", {16})));
  CHECK(sample_stream_seed(7, 4, 0, "timestep") != sample_stream_seed(7, 4, 0, "timestep2"));
}

TEST_CASE("draws follow their distributions and the requested dtype") {
  const at::Tensor u = sample_rand(batch_of({0, 1, 2, 3}), "u", {4096});
  CHECK(u.min().item<float>() >= 0.0f);
  CHECK(u.max().item<float>() < 1.0f);
  CHECK(std::abs(u.mean().item<float>() - 0.5f) < 0.02f);
  const at::Tensor n = sample_randn(batch_of({0, 1}), "n", {8192}, at::kDouble);
  CHECK((n.scalar_type() == at::kDouble));
  CHECK(std::abs(n.std().item<double>() - 1.0) < 0.03);
  CHECK((sample_rand(batch_of({0, 1}), "s").sizes() == at::IntArrayRef({2})));  // one scalar per sample
}

TEST_CASE("a batch without sample ids cannot draw, and says how to fix it") {
  Batch batch = batch_of({1, 2});
  batch.sample_ids.clear();
  CHECK_THROWS_WITH_AS(sample_randn(batch, "noise"), doctest::Contains("carries 0 sample ids"), Error);
}

TEST_CASE("a slice of a batch keeps its samples' ids, epoch and seed") {
  Batch batch = batch_of({10, 11, 12, 13}, 3, 9);
  batch.fields["x"] = at::arange(8, at::kFloat).view({4, 2});
  const Batch slice = batch.slice(1, 2);
  CHECK(slice.size == 2);
  CHECK(slice.sample_ids == std::vector<std::int64_t>{11, 12});
  CHECK(slice.epoch == 3);
  CHECK(slice.seed == 9);
  CHECK(at::equal(slice.at("x"), batch.at("x").narrow(0, 1, 2)));
  CHECK(at::equal(sample_randn(slice, "noise", {3}), sample_randn(batch, "noise", {3}).narrow(0, 1, 2)));
  CHECK_THROWS_AS(batch.slice(3, 2), Error);
}

TEST_CASE("the data loader's batches carry their samples' ids, the epoch and the seed") {
  SyntheticDataset::Options options;
  options.size = 12;
  options.seed = 1;
  auto data = std::make_shared<SyntheticDataset>(std::vector<FieldSpec>{{"x", {2}, at::kFloat}}, options);
  auto sampler = std::make_shared<BucketSampler>(*data, BucketSampler::Options{2, 1, 3, {}, true, true, 5});
  DataLoader::Options loader_options;
  loader_options.rank = 1;
  loader_options.seed = 42;
  DataLoader loader(data, sampler, loader_options);
  loader.start_epoch(2);
  const std::optional<Batch> batch = loader.next();
  REQUIRE(batch);
  const std::vector<std::int64_t> expected = sampler->micro_batch(sampler->epoch(2).front(), 1, 0);
  CHECK(batch->sample_ids == expected);
  CHECK(batch->epoch == 2);
  CHECK(batch->seed == 42);
  CHECK(at::equal(batch->at("x")[0], data->get(expected[0]).at("x")));
}

TEST_CASE("every rank's and micro-batch's batch of an optimizer step draws the step's one number") {
  SyntheticDataset::Options options;
  options.size = 24;
  options.seed = 1;
  auto data = std::make_shared<SyntheticDataset>(std::vector<FieldSpec>{{"x", {2}, at::kFloat}}, options);
  // 2 ranks x 2 micro-batches x 2 samples: 3 optimizer steps an epoch.
  auto sampler = std::make_shared<BucketSampler>(*data, BucketSampler::Options{2, 2, 2, {}, true, true, 5});
  std::vector<std::vector<double>> drawn(2);  // each rank's draws, a micro-batch after another
  for (int rank = 0; rank < 2; ++rank) {
    DataLoader::Options loader_options;
    loader_options.rank = rank;
    loader_options.seed = 42;
    DataLoader loader(data, sampler, loader_options);
    loader.start_epoch(1);
    while (const std::optional<Batch> batch = loader.next()) {
      CHECK(batch->step == static_cast<std::int64_t>(drawn[static_cast<std::size_t>(rank)].size()) / 2);
      drawn[static_cast<std::size_t>(rank)].push_back(step_rand(*batch, "exit_step"));
    }
  }
  REQUIRE(drawn[0].size() == 6);
  CHECK(drawn[0] == drawn[1]);  // ranks alike
  for (std::size_t i = 0; i < 6; i += 2) CHECK(drawn[0][i] == drawn[0][i + 1]);  // micro-batches of a step alike
  CHECK(drawn[0][0] != drawn[0][2]);  // steps apart
  CHECK(drawn[0][2] != drawn[0][4]);
  Batch validation = batch_of({1, 2});  // step -1: repeats
  CHECK(step_rand(validation, "exit_step") == step_rand(validation, "exit_step"));
  CHECK(step_rand(validation, "exit_step") != step_rand(validation, "critic_exit_step"));
}
