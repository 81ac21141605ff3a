#include "sampling/bucket_sampler.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wanfw {

namespace {

/// A permutation of [0, n) drawn from `seed`.
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor perm = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
  const auto* p = perm.data_ptr<std::int64_t>();
  return {p, p + n};
}

}  // namespace

BucketSampler::BucketSampler(const Dataset& dataset, Options options) : options_(std::move(options)) {
  if (options_.world_size < 1 || options_.accumulation < 1 || options_.batch_size < 1)
    throw Error(fmt::format("internal: sampler for world size {}, accumulation {}, batch size {}", options_.world_size,
                            options_.accumulation, options_.batch_size));
  const auto& buckets = dataset.buckets();
  const std::int64_t n = dataset.size();
  if (n < 1) throw DataError("the data set holds no samples", "check the data set's folder or its manifest");
  members_.resize(buckets.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t b = dataset.bucket_of(i);
    if (b < 0 || b >= static_cast<std::int64_t>(buckets.size()))
      throw DataError(fmt::format("{} is in bucket {}, but the data set has {} bucket(s)", dataset.describe_sample(i), b,
                                  buckets.size()));
    members_[static_cast<std::size_t>(b)].push_back(i);
  }
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    BucketPlan p;
    p.bucket = buckets[b];
    p.samples = static_cast<std::int64_t>(members_[b].size());
    p.batch_size = b < options_.bucket_batch_size.size() && options_.bucket_batch_size[b] > 0
                       ? options_.bucket_batch_size[b]
                       : options_.batch_size;
    const std::int64_t per_step = p.batch_size * options_.world_size * options_.accumulation;
    p.steps = p.samples / per_step;
    p.leftover = p.samples % per_step;
    if (!options_.drop_last && p.leftover > 0) {
      ++p.steps;
      p.repeated = per_step - p.leftover;
    }
    steps_per_epoch_ += p.steps;
    plan_.push_back(p);
  }
  if (steps_per_epoch_ == 0) {
    std::string sizes;
    for (const auto& p : plan_)
      sizes += fmt::format("{}bucket {}: {} samples, {} per step", sizes.empty() ? "" : "; ", p.bucket.name(), p.samples,
                           p.batch_size * options_.world_size * options_.accumulation);
    throw DataError(fmt::format("no bucket holds enough samples for one optimizer step ({})", sizes),
                    "lower data.batch_size or the accumulation, use fewer ranks, or set data.drop_last: false");
  }
}

std::vector<BucketSampler::StepBatch> BucketSampler::epoch(std::int64_t epoch) const {
  std::vector<StepBatch> steps;
  steps.reserve(static_cast<std::size_t>(steps_per_epoch_));
  const std::uint64_t epoch_seed = mix_seed(options_.seed + static_cast<std::uint64_t>(epoch));
  for (std::size_t b = 0; b < members_.size(); ++b) {
    const BucketPlan& p = plan_[b];
    if (p.steps == 0) continue;
    std::vector<std::int64_t> order = members_[b];
    if (options_.shuffle) {
      const auto perm = permutation(p.samples, mix_seed(epoch_seed ^ static_cast<std::uint64_t>(b + 1)));
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = members_[b][static_cast<std::size_t>(perm[i])];
    }
    for (std::int64_t i = 0; i < p.repeated; ++i) order.push_back(order[static_cast<std::size_t>(i % p.samples)]);
    const std::int64_t per_step = p.batch_size * options_.world_size * options_.accumulation;
    for (std::int64_t s = 0; s < p.steps; ++s)
      steps.push_back({static_cast<std::int64_t>(b),
                       {order.begin() + s * per_step, order.begin() + (s + 1) * per_step}});
  }
  if (options_.shuffle) {
    const auto perm = permutation(static_cast<std::int64_t>(steps.size()), epoch_seed);
    std::vector<StepBatch> shuffled;
    shuffled.reserve(steps.size());
    for (const std::int64_t i : perm) shuffled.push_back(std::move(steps[static_cast<std::size_t>(i)]));
    steps = std::move(shuffled);
  }
  return steps;
}

std::vector<std::int64_t> BucketSampler::micro_batch(const StepBatch& step, int rank, int micro) const {
  const std::int64_t b = plan_[static_cast<std::size_t>(step.bucket)].batch_size;
  const std::int64_t first = (static_cast<std::int64_t>(micro) * options_.world_size + rank) * b;
  return {step.samples.begin() + first, step.samples.begin() + first + b};
}

std::vector<std::int64_t> BucketSampler::micro_batch_of_all(const StepBatch& step, int micro) const {
  const std::int64_t b = plan_[static_cast<std::size_t>(step.bucket)].batch_size * options_.world_size;
  const std::int64_t first = static_cast<std::int64_t>(micro) * b;
  return {step.samples.begin() + first, step.samples.begin() + first + b};
}

std::vector<std::string> BucketSampler::describe() const {
  std::vector<std::string> lines;
  std::int64_t samples = 0, used = 0, dropped = 0, repeated = 0;
  for (const auto& p : plan_) {
    const std::int64_t per_step = p.batch_size * options_.world_size * options_.accumulation;
    std::string leftovers = "none left over";
    if (p.leftover > 0)
      leftovers = options_.drop_last
                      ? fmt::format("{} left over, skipped this epoch (others next epoch; data.drop_last)", p.leftover)
                      : fmt::format("{} left over, completed with {} repeated", p.leftover, p.repeated);
    lines.push_back(fmt::format("bucket {}: {} samples, batch {} per device, {} steps of {} per epoch, {}", p.bucket.name(),
                                p.samples, p.batch_size, p.steps, per_step, leftovers));
    samples += p.samples;
    used += p.steps * per_step - p.repeated;
    dropped += options_.drop_last ? p.leftover : 0;
    repeated += p.repeated;
  }
  lines.push_back(fmt::format("{} samples in {} bucket(s): {} steps per epoch train on {} ({} skipped, {} repeated)",
                              samples, plan_.size(), steps_per_epoch_, used, dropped, repeated));
  return lines;
}

}  // namespace wanfw
