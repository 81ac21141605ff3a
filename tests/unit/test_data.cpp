#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "data_loader.hpp"
#include "wanfw/data.hpp"
#include "wanfw/error.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {
const std::vector<FieldSpec> kFields = {{"x", {3, 2}, at::kFloat}, {"label", {}, at::kLong, FieldDistribution::Integer, 5}};
}

TEST_CASE("a synthetic sample depends only on the seed and its index") {
  const SyntheticDataset a(kFields, 10, 7), b(kFields, 10, 7), other_seed(kFields, 10, 8);
  CHECK(at::equal(a.get(3).at("x"), b.get(3).at("x")));
  CHECK_FALSE(at::equal(a.get(3).at("x"), a.get(4).at("x")));
  CHECK_FALSE(at::equal(a.get(3).at("x"), other_seed.get(3).at("x")));
}

TEST_CASE("synthetic samples have the declared fields, shapes and dtypes") {
  const auto sample = SyntheticDataset(kFields, 4, 1).get(0);
  CHECK((sample.at("x").sizes() == at::IntArrayRef({3, 2})));
  CHECK((sample.at("label").scalar_type() == at::kLong));
  CHECK(sample.at("label").item<std::int64_t>() < 5);
}

TEST_CASE("collate stacks samples along a new batch dimension") {
  const SyntheticDataset data(kFields, 4, 1);
  const Batch batch = collate({data.get(0), data.get(1)});
  CHECK(batch.size == 2);
  CHECK((batch.at("x").sizes() == at::IntArrayRef({2, 3, 2})));
  CHECK_THROWS_WITH_AS(batch.at("y"), doctest::Contains("no field 'y'"), Error);
}

TEST_CASE("shards of all ranks are disjoint and cover the data set when drop_last is on") {
  std::multiset<std::int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    ShardedSampler sampler({12, rank, 3, true, true, 5});
    sampler.set_epoch(2);
    CHECK(sampler.indices().size() == 4);
    seen.insert(sampler.indices().begin(), sampler.indices().end());
  }
  CHECK(seen.size() == 12);
  CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 12);
}

TEST_CASE("without drop_last, shards are padded to equal length and still cover the data set") {
  std::set<std::int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    ShardedSampler sampler({10, rank, 3, false, false, 0});
    CHECK(sampler.indices().size() == 4);
    seen.insert(sampler.indices().begin(), sampler.indices().end());
  }
  CHECK(seen.size() == 10);
}

TEST_CASE("the shuffle depends on seed and epoch only") {
  ShardedSampler a({50, 0, 1, true, true, 9}), b({50, 0, 1, true, true, 9});
  a.set_epoch(1);
  b.set_epoch(1);
  CHECK(a.indices() == b.indices());
  b.set_epoch(2);
  CHECK(a.indices() != b.indices());
}

TEST_CASE("the shuffle matches PyTorch's DistributedSampler order (randperm seeded with seed + epoch)") {
  ShardedSampler sampler({8, 0, 1, true, true, 3});
  sampler.set_epoch(4);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor expected = at::randperm(8, generator, at::TensorOptions().dtype(at::kLong));
  CHECK(sampler.indices() == std::vector<std::int64_t>(expected.data_ptr<std::int64_t>(), expected.data_ptr<std::int64_t>() + 8));
}

TEST_CASE("worker threads deliver the same batches in the same order as the calling thread") {
  auto data = std::make_shared<SyntheticDataset>(kFields, 40, 3);
  auto batches_with = [&](int workers) {
    DataLoader loader(data, std::make_shared<ShardedSampler>(ShardedSampler::Options{40, 0, 1, true, true, 3}),
                      {4, true, workers, 2});
    loader.start_epoch(1, 2);
    std::vector<at::Tensor> out;
    while (auto batch = loader.next()) out.push_back(batch->at("x"));
    return out;
  };
  const auto inline_batches = batches_with(0), threaded = batches_with(3);
  REQUIRE(inline_batches.size() == 8);  // 10 batches per epoch, started at batch 2
  REQUIRE(threaded.size() == inline_batches.size());
  for (std::size_t i = 0; i < threaded.size(); ++i) CHECK(at::equal(threaded[i], inline_batches[i]));
}

TEST_CASE("a failure inside a worker reaches the caller") {
  struct FailingDataset : Dataset {
    std::int64_t size() const override { return 8; }
    std::map<std::string, at::Tensor> get(std::int64_t index) const override {
      if (index >= 0) throw Error("sample " + std::to_string(index) + " is unreadable");
      return {};
    }
  };
  DataLoader loader(std::make_shared<FailingDataset>(),
                    std::make_shared<ShardedSampler>(ShardedSampler::Options{8, 0, 1, false, true, 0}), {2, true, 2, 1});
  loader.start_epoch(0);
  CHECK_THROWS_WITH_AS(loader.next(), doctest::Contains("is unreadable"), Error);
}
