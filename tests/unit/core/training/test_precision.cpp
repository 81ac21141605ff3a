#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "wanfw/precision.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using wanfw::Precision;
using wanfw::PrecisionMode;
using wanfw::PrecisionOptions;

namespace {
Precision fp16(std::int64_t growth_interval = 3) {
  PrecisionOptions o;
  o.mode = PrecisionMode::FP16;
  o.init_scale = 1024;
  o.growth_interval = growth_interval;
  return Precision(o);
}

torch::Tensor parameter_with_grad(const torch::Tensor& grad) {
  torch::Tensor p = torch::zeros_like(grad).requires_grad_(true);
  p.mutable_grad() = grad.clone();
  return p;
}
}  // namespace

TEST_CASE("the fp16 scaler unscales finite gradients by the loss scale") {
  Precision precision = fp16();
  const torch::Tensor p = parameter_with_grad(torch::full({4}, 2048.0));
  CHECK_FALSE(precision.unscale_and_check({p}));
  CHECK(torch::allclose(p.grad(), torch::full({4}, 2.0)));
}

TEST_CASE("the fp16 scaler reports an inf gradient and backs the scale off") {
  Precision precision = fp16();
  const torch::Tensor p = parameter_with_grad(torch::tensor({1.0f, INFINITY}));
  const bool overflow = precision.unscale_and_check({p});
  CHECK(overflow);
  precision.update(overflow);
  CHECK(precision.scaler().scale == 512.0);
  CHECK(precision.scaler().growth_tracker == 0);
}

TEST_CASE("the fp16 scale grows after growth_interval clean steps") {
  Precision precision = fp16(/*growth_interval=*/3);
  for (int i = 0; i < 2; ++i) precision.update(false);
  CHECK(precision.scaler().scale == 1024.0);
  precision.update(false);
  CHECK(precision.scaler().scale == 2048.0);
  CHECK(precision.scaler().growth_tracker == 0);
}

TEST_CASE("bf16 precision runs matmuls in bfloat16 inside its autocast scope only") {
  PrecisionOptions o;
  o.mode = PrecisionMode::BF16;
  const Precision precision(o);
  const torch::Tensor a = torch::randn({4, 4});
  {
    Precision::AutocastScope scope(precision, torch::kCPU);
    CHECK((torch::mm(a, a).scalar_type() == torch::kBFloat16));
    CHECK((precision.scale(torch::ones({})).item<float>() == 1.0f));  // no loss scaling in bf16
  }
  CHECK((torch::mm(a, a).scalar_type() == torch::kFloat));
  CHECK_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}
