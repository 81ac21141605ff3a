// Batches assembled by the loader: each sample's bytes copied once into its row, checked for NaN
// and Inf on the way, in memory recycled from batch to batch.

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "data/batch_assembly.hpp"
#include "data/batch_buffers.hpp"
#include "numerics/finite_copy.hpp"
#include "wanfw/data.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {
// Sizes below and above the streaming threshold (256 KiB), with odd tails.
const std::int64_t kSizes[] = {1, 7, 33, 1000, 200'003, 300'001};

/// A contiguous target `offset` elements into a larger buffer: targets not aligned to 32 bytes.
at::Tensor target_at(std::int64_t offset, std::int64_t numel, at::ScalarType dtype) {
  return at::empty({offset + numel}, at::TensorOptions().dtype(dtype)).narrow(0, offset, numel);
}
}  // namespace

TEST_CASE("copy_finite copies every floating dtype bit for bit and finds one NaN or Inf wherever it is") {
  for (const auto dtype : {at::kBFloat16, at::kHalf, at::kFloat, at::kDouble}) {
    for (const std::int64_t numel : kSizes) {
      CAPTURE(dtype);
      CAPTURE(numel);
      // Finite extremes must pass: the largest finite value, subnormals, -0.
      at::Tensor source = at::randn({numel}).to(dtype);
      source[0] = -0.0;
      if (numel > 2) source[numel / 2] = at::Scalar(std::numeric_limits<float>::min() / 8);
      if (numel > 1) source[numel - 1] = dtype == at::kHalf ? 65504.0 : dtype == at::kBFloat16 ? 3.3895313892515355e38 : 3.0e38;
      for (const std::int64_t offset : {0, 1, 3}) {
        at::Tensor target = target_at(offset, numel, dtype);
        CHECK(copy_finite(target, source));
        CHECK(at::equal(target.view(at::kByte), source.view(at::kByte)));
      }
      for (const double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
        for (const std::int64_t at_index : {std::int64_t{0}, numel / 3, numel - 1}) {
          at::Tensor poisoned = source.clone();
          poisoned[at_index] = bad;
          at::Tensor target = target_at(1, numel, dtype);
          CHECK_FALSE(copy_finite(target, poisoned));
          CHECK(count_nonfinite(target) == 1);
          CHECK_FALSE(all_finite(poisoned));
        }
      }
      CHECK(all_finite(source));
    }
  }
}

TEST_CASE("copy_finite converts bf16 to float32 exactly as ATen does, and other pairs too") {
  for (const std::int64_t numel : kSizes) {
    CAPTURE(numel);
    const at::Tensor source = (at::randn({numel}) * 1e4).to(at::kBFloat16);
    at::Tensor widened = target_at(1, numel, at::kFloat);
    CHECK(copy_finite(widened, source));
    CHECK(at::equal(widened, source.to(at::kFloat)));
    at::Tensor poisoned = source.clone();
    poisoned[numel - 1] = std::nan("");
    CHECK_FALSE(copy_finite(widened, poisoned));
    // float32 -> bf16 (through ATen): a value too large for bf16 arrives infinite and is caught.
    const at::Tensor wide = at::randn({numel});
    at::Tensor narrowed = at::empty({numel}, at::kBFloat16);
    CHECK(copy_finite(narrowed, wide));
    CHECK(at::equal(narrowed, wide.to(at::kBFloat16)));
    at::Tensor overflowing = wide.clone();
    overflowing[0] = 3.4e38;
    CHECK_FALSE(copy_finite(narrowed, overflowing.to(at::kDouble) * 2));
  }
}

TEST_CASE("copy_finite copies integer fields without checking them") {
  const at::Tensor labels = at::arange(300'000, at::kLong);
  at::Tensor target = at::empty({300'000}, at::kLong);
  CHECK(copy_finite(target, labels));
  CHECK(at::equal(target, labels));
}

TEST_CASE("batch buffers are reused once their batch is freed, and never while it lives") {
  auto buffers = BatchBuffers::make(4);
  at::Tensor first = buffers->empty({4, 1000}, at::kFloat, false);
  const void* memory = first.data_ptr();
  at::Tensor second = buffers->empty({4, 1000}, at::kFloat, false);
  CHECK(second.data_ptr() != memory);
  CHECK(buffers->allocated() == 2);
  first.fill_(1);
  first = at::Tensor();  // the batch is done with: its memory goes back
  at::Tensor third = buffers->empty({4, 990}, at::kFloat, false);  // a little smaller fits too
  CHECK(third.data_ptr() == memory);
  CHECK(buffers->reused() == 1);
  CHECK(buffers->allocated() == 2);
  // A view keeps the memory: nothing comes back while any of it is referenced.
  at::Tensor row = third[1];
  third = at::Tensor();
  at::Tensor fourth = buffers->empty({4, 1000}, at::kFloat, false);
  CHECK(fourth.data_ptr() != memory);
  CHECK(buffers->allocated() == 3);
}

TEST_CASE("an assembled batch zero-pads text even in recycled memory, and refuses a row holding NaN") {
  auto buffers = BatchBuffers::make(4);
  buffers->empty({3, 5, 2}, at::kFloat, false).fill_(7);  // leave garbage in the pool
  const std::vector<Sample> samples = {
      {{"context", at::ones({2, 2})}, {"latents", at::full({3}, 1.0)}},
      {{"context", at::ones({5, 2})}, {"latents", at::full({3}, NAN)}},
      {{"context", at::ones({1, 2}, at::kBFloat16)}, {"latents", at::full({3}, 3.0)}},
  };
  BatchAssembly assembly(samples, {"context"}, {{"context", at::kFloat}}, buffers.get(), false);
  CHECK_FALSE(assembly.add(samples[0]));
  const auto bad = assembly.add(samples[1]);
  REQUIRE(bad);
  CHECK(bad->field == "latents");
  CHECK(bad->count == 3);
  CHECK_FALSE(assembly.add(samples[2]));  // takes the refused row
  const Batch batch = assembly.finish();
  CHECK(batch.size == 2);
  CHECK((batch.at("context").sizes() == at::IntArrayRef({2, 5, 2})));  // padded to the longest, bad one included
  CHECK(batch.at("context").sum().item<double>() == 6);                  // 2x2 + 1x2 ones, zeros elsewhere
  CHECK(at::equal(batch.at("latents"), at::tensor(std::vector<float>{1, 1, 1, 3, 3, 3}).view({2, 3})));
  CHECK(buffers->reused() >= 1);
}
