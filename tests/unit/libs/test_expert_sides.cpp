#include <cmath>

#include <ATen/ATen.h>

#include "wan/expert_sides.hpp"
#include "wan/wan_denoiser.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

wanfw::Batch step_of(std::int64_t samples) {
  wanfw::Batch batch;
  batch.size = samples;
  batch.step_samples = samples;
  for (std::int64_t i = 0; i < samples; ++i) {
    batch.sample_ids.push_back(1000 + i);
    batch.step_positions.push_back(i);
  }
  return batch;
}

wan::TimestepSampling shift(double k) {
  wan::TimestepSampling s;
  s.method = wan::SigmaDistribution::Shift;
  s.shift = k;
  return s;
}

}  // namespace

TEST_CASE("the share of samples above the A14B boundary: 63.2 % at shift 12, 30 % at shift 3") {
  CHECK(1 - wan::probability_below(shift(12), 0.875) == doctest::Approx(0.632).epsilon(1e-3));
  CHECK(1 - wan::probability_below(shift(3), 0.875) == doctest::Approx(0.30).epsilon(1e-9));
  wan::TimestepSampling logit;
  logit.method = wan::SigmaDistribution::LogitNormal;
  CHECK(wan::probability_below(logit, 0.5) == doctest::Approx(0.5));
  CHECK(wan::probability_below(wan::TimestepSampling{}, 0.9) == doctest::Approx(0.9));
}

TEST_CASE("a fixed share puts round(share x step) of a step's samples on the high-noise side, spread over it") {
  const at::Tensor high = wan::high_noise_places(step_of(10), 0.3);
  CHECK(high.sum().item<std::int64_t>() == 3);
  // Spread: no two high-noise places side by side at a share under one half.
  CHECK((high.narrow(0, 0, 9) & high.narrow(0, 1, 9)).sum().item<std::int64_t>() == 0);
  CHECK(wan::high_noise_places(step_of(6), 0.5).sum().item<std::int64_t>() == 3);
  CHECK(wan::high_noise_places(step_of(7), 0.0).sum().item<std::int64_t>() == 0);
  CHECK(wan::high_noise_places(step_of(7), 1.0).sum().item<std::int64_t>() == 7);
}

TEST_CASE("draws on a side follow the sampling's distribution on that side, and route to that side's expert") {
  // 4,000 samples, half on each side of t = 900 (a float32 boundary that is not exact), shift 5:
  // each side's empirical distribution against the sampling's, restricted to the side.
  const double boundary = 0.9;
  const wan::TimestepSampling s = shift(5);
  const wanfw::Batch batch = step_of(4000);
  const at::Tensor high = wan::high_noise_places(batch, 0.5);
  const at::Tensor sigma = wan::draw_sigma_on_sides(batch, s, boundary, high);
  const wan::WanDenoiser router(wan::wan_preset("tiny"), wan::Expert::Both, boundary);
  CHECK(at::equal(router.high_noise_samples(sigma), high));
  const double below = wan::probability_below(s, boundary);
  for (const double level : {0.3, 0.6, 0.85, 0.92, 0.97}) {
    const bool on_high = level >= boundary;
    const at::Tensor side = sigma.masked_select(on_high ? high : ~high);
    const double empirical = (side < level).to(at::kDouble).mean().item<double>();
    const double expected = on_high ? (wan::probability_below(s, level) - below) / (1 - below)
                                    : wan::probability_below(s, level) / below;
    CHECK(std::abs(empirical - expected) < 0.04);  // 2,000 draws a side: under 4 standard deviations
  }
}

TEST_CASE("a causal student's chunk levels on a side all route to that side's expert, each chunk its own draw") {
  const double boundary = 0.875;
  const wanfw::Batch batch = step_of(400);
  const at::Tensor high = wan::high_noise_places(batch, 0.5);
  const at::Tensor sigma = wan::draw_sigma_on_sides(batch, shift(5), boundary, high, 3);  // 3 chunks a sample
  REQUIRE(sigma.sizes() == at::IntArrayRef{400, 3});
  const wan::WanDenoiser router(wan::wan_preset("tiny"), wan::Expert::Both, boundary);
  for (std::int64_t chunk = 0; chunk < 3; ++chunk)
    CHECK(at::equal(router.high_noise_samples(sigma.select(1, chunk).contiguous()), high));
  // The chunks of a sample are drawn apart, not one level repeated.
  CHECK((sigma.select(1, 0) != sigma.select(1, 1)).all().item<bool>());
}
