#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "sampling/bucket_sampler.hpp"
#include "data/data_loader.hpp"
#include "synthetic/synthetic_dataset.hpp"
#include "wanfw/data.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {
const std::vector<FieldSpec> kFields = {{"x", {3, 2}, at::kFloat}, {"label", {}, at::kLong, FieldDistribution::Integer, 5}};

SyntheticDataset::Options sized(std::int64_t size, std::uint64_t seed, std::vector<Bucket> buckets = {Bucket{}}) {
  SyntheticDataset::Options o;
  o.size = size;
  o.seed = seed;
  o.buckets = std::move(buckets);
  return o;
}

/// Latents of any bucket and a text embedding of up to 6 tokens, like the Wan model's fields.
std::vector<FieldSpec> video_fields() {
  FieldSpec latents{"latents", {2, dim::frames, dim::height, dim::width}};
  FieldSpec text{"context", {dim::tokens, 4}};
  text.max_tokens = 6;
  return {latents, text};
}

const std::vector<Bucket> kTwoBuckets = {{3, 4, 4}, {5, 4, 8}};

/// Every micro-batch every rank sees in `epoch`, by rank.
std::vector<std::vector<std::vector<std::int64_t>>> deal(const BucketSampler& sampler, std::int64_t epoch) {
  const auto& o = sampler.options();
  std::vector<std::vector<std::vector<std::int64_t>>> by_rank(static_cast<std::size_t>(o.world_size));
  for (const auto& step : sampler.epoch(epoch))
    for (int micro = 0; micro < o.accumulation; ++micro)
      for (int rank = 0; rank < o.world_size; ++rank)
        by_rank[static_cast<std::size_t>(rank)].push_back(sampler.micro_batch(step, rank, micro));
  return by_rank;
}
}  // namespace

TEST_CASE("a synthetic sample depends only on the seed and its index") {
  const SyntheticDataset a(kFields, sized(10, 7)), b(kFields, sized(10, 7)), other_seed(kFields, sized(10, 8));
  CHECK(at::equal(a.get(3).at("x"), b.get(3).at("x")));
  CHECK_FALSE(at::equal(a.get(3).at("x"), a.get(4).at("x")));
  CHECK_FALSE(at::equal(a.get(3).at("x"), other_seed.get(3).at("x")));
}

TEST_CASE("synthetic samples have the declared fields, shapes and dtypes") {
  const auto sample = SyntheticDataset(kFields, sized(4, 1)).get(0);
  CHECK((sample.at("x").sizes() == at::IntArrayRef({3, 2})));
  CHECK((sample.at("label").scalar_type() == at::kLong));
  CHECK(sample.at("label").item<std::int64_t>() < 5);
}

TEST_CASE("synthetic samples take their bucket's frames, height and width, and the text length asked for") {
  auto options = sized(4, 1, kTwoBuckets);
  options.tokens = 5;
  const SyntheticDataset data(video_fields(), options);
  CHECK(data.bucket_of(0) == 0);
  CHECK(data.bucket_of(3) == 1);
  CHECK((data.get(0).at("latents").sizes() == at::IntArrayRef({2, 3, 4, 4})));
  CHECK((data.get(1).at("latents").sizes() == at::IntArrayRef({2, 5, 4, 8})));
  CHECK((data.get(1).at("context").sizes() == at::IntArrayRef({5, 4})));
}

TEST_CASE("synthetic patterns: samples of one pattern share their caption, and their latents correlate") {
  auto options = sized(64, 3, {{3, 4, 4}});
  options.patterns = true;
  const SyntheticDataset data(video_fields(), options);
  std::int64_t first = 0, same = -1, other = -1;
  for (std::int64_t i = 1; i < 64 && (same < 0 || other < 0); ++i) {
    if (data.pattern_of(i) == data.pattern_of(first) && same < 0) same = i;
    if (data.pattern_of(i) != data.pattern_of(first) && other < 0) other = i;
  }
  REQUIRE(same > 0);
  REQUIRE(other > 0);
  CHECK(at::equal(data.get(first).at("context"), data.get(same).at("context")));
  CHECK_FALSE(at::equal(data.get(first).at("context"), data.get(other).at("context")));
  auto correlation = [&](std::int64_t a, std::int64_t b) {
    const at::Tensor x = data.get(a).at("latents").flatten(), y = data.get(b).at("latents").flatten();
    return ((x - x.mean()) * (y - y.mean())).mean().item<double>() / (x.std().item<double>() * y.std().item<double>());
  };
  CHECK(correlation(first, same) > 0.8);  // the pattern dominates its 0.3 noise
  // The validation set draws new noise around the same patterns.
  const auto held_out = data.validation_set(8, 99);
  CHECK_FALSE(at::equal(held_out->get(0).at("latents"), data.get(0).at("latents")));
}

TEST_CASE("Bucket::parse reads FxHxW and refuses anything else") {
  CHECK(Bucket::parse("21x60x104") == Bucket{21, 60, 104});
  CHECK(Bucket::parse("21x60x104").name() == "21x60x104");
  for (const std::string bad : {"", "21x60", "21x60x104x1", "0x8x8", "3x8x-8", "3 x8x8", "3x8x8 "}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(Bucket::parse(bad), doctest::Contains("is not a bucket"), Error);
  }
}

TEST_CASE("conform_sample converts dtypes and names the sample, field and shapes it refuses") {
  const auto fields = video_fields();
  const Bucket bucket{3, 4, 4};
  Sample good = {{"latents", at::zeros({2, 3, 4, 4}, at::kBFloat16)}, {"context", at::ones({2, 4})}, {"extra", at::ones({1})}};
  const Sample out = conform_sample(good, fields, bucket, "clip_7 (shard-00000.safetensors)");
  CHECK((out.at("latents").scalar_type() == at::kFloat));
  CHECK(out.count("extra") == 0);
  CHECK_THROWS_WITH_AS(conform_sample({{"latents", at::zeros({2, 5, 4, 4})}, {"context", at::ones({2, 4})}}, fields,
                                      bucket, "clip_7 (shard-00000.safetensors)"),
                       doctest::Contains("clip_7 (shard-00000.safetensors): field 'latents' has shape [2, 5, 4, 4], but "
                                         "the model needs [2, frames, height, width] (bucket 3x4x4)"),
                       DataError);
  CHECK_THROWS_WITH_AS(conform_sample({{"latents", at::zeros({2, 3, 4, 4})}, {"context", at::ones({7, 4})}}, fields,
                                      bucket, "clip_7"),
                       doctest::Contains("at most 6 tokens"), DataError);
  CHECK_THROWS_WITH_AS(conform_sample({{"latents", at::zeros({2, 3, 4, 4})}}, fields, bucket, "clip_7"),
                       doctest::Contains("clip_7: has no field 'context'"), DataError);
  at::Tensor nan = at::zeros({2, 3, 4, 4});
  nan[0][1][2][3] = NAN;
  CHECK_THROWS_WITH_AS(conform_sample({{"latents", nan}, {"context", at::ones({2, 4})}}, fields, bucket, "clip_7"),
                       doctest::Contains("clip_7: field 'latents' holds 1 NaN or infinite value(s) of 96"), DataError);
}

TEST_CASE("collate stacks samples along a new batch dimension and zero-pads text to the longest") {
  const Batch batch = collate({{{"x", at::ones({2})}, {"t", at::ones({2, 3})}}, {{"x", at::ones({2})}, {"t", at::ones({4, 3})}}},
                              {"t"});
  CHECK(batch.size == 2);
  CHECK((batch.at("x").sizes() == at::IntArrayRef({2, 2})));
  CHECK((batch.at("t").sizes() == at::IntArrayRef({2, 4, 3})));
  CHECK(batch.at("t")[0].sum().item<double>() == 6);  // two real tokens of three ones, then zeros
  CHECK_THROWS_WITH_AS(batch.at("y"), doctest::Contains("no field 'y'"), Error);
}

TEST_CASE("every step batch comes from one bucket, and an epoch covers each sample once with drop_last off") {
  const SyntheticDataset data(video_fields(), sized(22, 1, kTwoBuckets));  // 11 samples per bucket
  const BucketSampler sampler(data, {2, 1, 2, {}, true, false, 5});
  std::multiset<std::int64_t> seen;
  for (const auto& step : sampler.epoch(3)) {
    CHECK(step.samples.size() == 4);
    for (const std::int64_t i : step.samples) CHECK(data.bucket_of(i) == step.bucket);
    seen.insert(step.samples.begin(), step.samples.end());
  }
  CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 22);
  CHECK(seen.size() == 24);  // each bucket's 3 leftovers completed with 1 repeat
  CHECK(sampler.plan()[0].repeated == 1);
}

TEST_CASE("with drop_last, a bucket's tail is skipped for the epoch and the plan says so") {
  const SyntheticDataset data(video_fields(), sized(22, 1, kTwoBuckets));
  const BucketSampler sampler(data, {2, 1, 2, {}, true, true, 5});
  CHECK(sampler.steps_per_epoch() == 4);
  const auto lines = sampler.describe();
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "bucket 3x4x4: 11 samples, batch 2 per device, 2 steps of 4 per epoch, 3 left over, skipped this "
                    "epoch (others next epoch; data.drop_last)");
  CHECK(lines[2] == "22 samples in 2 bucket(s): 4 steps per epoch train on 16 (6 skipped, 0 repeated)");
}

TEST_CASE("per-bucket batch sizes set each bucket's step batch") {
  const SyntheticDataset data(video_fields(), sized(24, 1, kTwoBuckets));
  const BucketSampler sampler(data, {1, 1, 2, {0, 4}, false, true, 0});
  for (const auto& step : sampler.epoch(0)) CHECK(step.samples.size() == (step.bucket == 0 ? 2u : 4u));
  CHECK(sampler.steps_per_epoch() == 6 + 3);
}

TEST_CASE("the order depends on seed and epoch only, and every layout of one step batch trains the same samples") {
  const SyntheticDataset data(video_fields(), sized(40, 1, kTwoBuckets));
  const BucketSampler a(data, {1, 1, 4, {}, true, true, 9}), b(data, {1, 1, 4, {}, true, true, 9});
  CHECK(a.epoch(1)[0].samples == b.epoch(1)[0].samples);
  CHECK(a.epoch(1)[0].samples != a.epoch(2)[0].samples);
  // 2 ranks x 2 micro-batches x 1 sample and 1 rank x 1 batch of 4 cover the same samples per step.
  const BucketSampler spread(data, {2, 2, 1, {}, true, true, 9});
  const auto one = a.epoch(4), many = spread.epoch(4);
  REQUIRE(one.size() == many.size());
  for (std::size_t s = 0; s < one.size(); ++s) {
    std::multiset<std::int64_t> dealt;
    for (int rank = 0; rank < 2; ++rank)
      for (int micro = 0; micro < 2; ++micro) {
        const auto part = spread.micro_batch(many[s], rank, micro);
        dealt.insert(part.begin(), part.end());
      }
    CHECK(dealt == std::multiset<std::int64_t>(one[s].samples.begin(), one[s].samples.end()));
  }
}

TEST_CASE("ranks get disjoint micro-batches that together cover the epoch") {
  const SyntheticDataset data(video_fields(), sized(48, 2, kTwoBuckets));
  const BucketSampler sampler(data, {3, 1, 2, {}, true, true, 7});
  std::multiset<std::int64_t> seen;
  for (const auto& rank_batches : deal(sampler, 0))
    for (const auto& batch : rank_batches) seen.insert(batch.begin(), batch.end());
  CHECK(seen.size() == 48);
  CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 48);
}

TEST_CASE("a data set too small for one step is refused, naming its buckets") {
  const SyntheticDataset data(video_fields(), sized(6, 1, kTwoBuckets));
  CHECK_THROWS_WITH_AS(BucketSampler(data, {2, 2, 1, {}, true, true, 0}),
                       doctest::Contains("no bucket holds enough samples for one optimizer step (bucket 3x4x4: 3 "
                                         "samples, 4 per step; bucket 5x4x8: 3 samples, 4 per step)"),
                       DataError);
}

TEST_CASE("worker threads deliver the same batches in the same order as the calling thread") {
  auto data = std::make_shared<SyntheticDataset>(video_fields(), sized(40, 3, kTwoBuckets));
  auto sampler = std::make_shared<BucketSampler>(*data, BucketSampler::Options{1, 1, 4, {}, true, true, 3});
  auto batches_with = [&](int workers) {
    DataLoader loader(data, sampler, {0, workers, 2, 3, video_fields()});
    loader.start_epoch(1, 2);
    std::vector<at::Tensor> out;
    while (auto batch = loader.next()) out.push_back(batch->at("latents"));
    return out;
  };
  const auto inline_batches = batches_with(0), threaded = batches_with(3);
  REQUIRE(inline_batches.size() == 8);  // 10 batches per epoch, started at batch 2
  REQUIRE(threaded.size() == inline_batches.size());
  for (std::size_t i = 0; i < threaded.size(); ++i) CHECK(at::equal(threaded[i], inline_batches[i]));
}

TEST_CASE("the loader's positions in samples map back to the same micro-batch") {
  auto data = std::make_shared<SyntheticDataset>(video_fields(), sized(40, 3, kTwoBuckets));
  auto sampler = std::make_shared<BucketSampler>(*data, BucketSampler::Options{2, 2, 1, {0, 2}, true, true, 3});
  const DataLoader loader(data, sampler, {});
  for (std::int64_t batch = 0; batch <= loader.batches_per_epoch(); batch += 2)
    CHECK(loader.batch_after(5, loader.samples_before(5, batch)) == batch);
  CHECK_FALSE(loader.batch_after(5, 1).has_value());
}

namespace {
struct FailingDataset : Dataset {
  std::vector<Bucket> buckets_ = {Bucket{}};
  std::int64_t size() const override { return 8; }
  Sample get(std::int64_t index) const override {
    if (index % 2 == 1) throw DataError("sample " + std::to_string(index) + " is unreadable");
    return {{"x", at::full({2}, static_cast<double>(index))}};
  }
  const std::vector<Bucket>& buckets() const override { return buckets_; }
  std::int64_t bucket_of(std::int64_t) const override { return 0; }
};
}  // namespace

TEST_CASE("a failure inside a worker reaches the caller") {
  auto data = std::make_shared<FailingDataset>();
  DataLoader::Options options;
  options.workers = 2;
  DataLoader loader(data, std::make_shared<BucketSampler>(*data, BucketSampler::Options{1, 1, 2, {}, false, true, 0}),
                    options);
  loader.start_epoch(0);
  CHECK_THROWS_WITH_AS(loader.next(), doctest::Contains("sample 1 is unreadable"), DataError);
}

TEST_CASE("with skip_bad_samples, bad samples are left out of their batch and counted") {
  auto data = std::make_shared<FailingDataset>();
  DataLoader::Options options;
  options.skip_bad_samples = true;
  DataLoader loader(data, std::make_shared<BucketSampler>(*data, BucketSampler::Options{1, 1, 2, {}, false, true, 0}),
                    options);
  loader.start_epoch(0);
  const auto batch = loader.next();
  REQUIRE(batch);
  CHECK(batch->sample_ids == std::vector<std::int64_t>{0});
  CHECK(loader.skipped() == 1);
}

TEST_CASE("caption dropout replaces a sample's caption with the empty one, by the sample's own stream") {
  auto options = sized(64, 3);
  options.patterns = true;
  auto data = std::make_shared<SyntheticDataset>(video_fields(), options);
  auto sampler = std::make_shared<BucketSampler>(*data, BucketSampler::Options{1, 1, 64, {}, false, true, 0});
  DataLoader::Options loader_options{0, 0, 2, 11, video_fields(), 0.5};
  DataLoader loader(data, sampler, loader_options);
  loader.start_epoch(2);
  const Batch batch = *loader.next();
  const at::Tensor empty = data->empty_caption().at("context");
  std::int64_t dropped = 0;
  for (std::int64_t i = 0; i < 64; ++i) {
    const bool is_empty = at::equal(batch.at("context")[i].narrow(0, 0, 1), empty) &&
                          batch.at("context")[i].narrow(0, 1, batch.at("context").size(1) - 1).abs().sum().item<double>() == 0;
    auto generator = at::make_generator<at::CPUGeneratorImpl>(sample_stream_seed(11, i, 2, "caption_dropout"));
    CHECK(is_empty == (at::rand({1}, generator).item<double>() < 0.5));
    dropped += is_empty ? 1 : 0;
  }
  CHECK(dropped > 16);
  CHECK(dropped < 48);
}
