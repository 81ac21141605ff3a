// The fp8 frozen weight (wan/fp8_weight.hpp): quantization within e4m3's rounding bound, the
// scale layouts, and a linear map that is the dequantized one's.

#include <cmath>

#include <torch/torch.h>

#include "fp8_scales.hpp"
#include "wan/fp8_weight.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

/// Weights as trained ones look: small normal values and a few large ones per row.
torch::Tensor weights(at::IntArrayRef shape, std::uint64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor w = torch::randn(shape) * 0.02;
  w.view(-1).index_put_({torch::randint(w.numel(), {w.numel() / 500})}, torch::randn({w.numel() / 500}) * 0.5);
  return w;
}

}  // namespace

TEST_CASE("fp8 quantization of real-sized weights stays within e4m3's rounding bound at every element") {
  // |w - dequantize(w)| <= max(2^-4 |w|, 2^-10 s), with one float32 rounding each for w / s and q s.
  for (const auto& shape : {std::vector<std::int64_t>{3072, 3072}, std::vector<std::int64_t>{1536, 1000},
                            std::vector<std::int64_t>{8960}}) {
    CAPTURE(c10::str(at::IntArrayRef(shape)));
    const torch::Tensor w = weights(shape, 7);
    const wan::Fp8Weight q = wan::quantize_fp8(w);
    const torch::Tensor error = (w - wan::dequantize_fp8(q, torch::kFloat32)).abs();
    const torch::Tensor bound =
        torch::maximum(w.abs() * std::ldexp(1.0, -4), fp8_element_scales(q) * std::ldexp(1.0, -10)) *
        (1 + std::ldexp(1.0, -21));
    CHECK((error <= bound).all().item<bool>());
    // The bound is reached, not loose: the worst element uses most of it.
    CHECK((error / bound).max().item<double>() > 0.5);
  }
}

TEST_CASE("fp8 scales are laid out by block of 64 inputs, by output channel, or for the whole tensor") {
  const wan::Fp8Weight block = wan::quantize_fp8(weights({96, 128}, 1));
  CHECK((block.scaling == wan::Fp8Scaling::Block64));
  CHECK(block.scales.sizes() == at::IntArrayRef({96, 2, 1}));
  const wan::Fp8Weight channel = wan::quantize_fp8(weights({96, 100}, 1));
  CHECK((channel.scaling == wan::Fp8Scaling::PerChannel));
  CHECK(channel.scales.sizes() == at::IntArrayRef({96, 1}));
  const wan::Fp8Weight tensor = wan::quantize_fp8(weights({4, 6, 8}, 1));
  CHECK((tensor.scaling == wan::Fp8Scaling::PerTensor));
  CHECK(tensor.scales.sizes() == at::IntArrayRef({1}));
  for (const auto* q : {&block, &channel, &tensor}) {
    CHECK((q->values.scalar_type() == at::kFloat8_e4m3fn));
    CHECK((q->scales.scalar_type() == torch::kFloat32));
  }
}

TEST_CASE("each block's largest magnitude quantizes to 448 exactly") {
  const wan::Fp8Weight q = wan::quantize_fp8(weights({64, 256}, 3));
  const torch::Tensor blocks = q.values.to(torch::kFloat32).reshape({64, 4, 64}).abs().amax(-1);
  CHECK(torch::equal(blocks, torch::full({64, 4}, 448.0)));
}

TEST_CASE("fp8 quantization turns NaN into 0 and keeps an all-zero block zero") {
  torch::Tensor w = weights({2, 128}, 5);
  w.index_put_({0, 3}, std::nan(""));
  w.index_put_({1, torch::indexing::Slice(64, 128)}, 0.0);
  const wan::Fp8Weight q = wan::quantize_fp8(w);
  const torch::Tensor back = wan::dequantize_fp8(q, torch::kFloat32);
  CHECK(back.index({0, 3}).item<float>() == 0.0f);
  CHECK(torch::isfinite(back).all().item<bool>());
  CHECK(torch::equal(back.index({1, torch::indexing::Slice(64, 128)}), torch::zeros({64})));
}

TEST_CASE("fp8_linear gives the dequantized weight's outputs and gradients, and no gradient to the weight") {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    CAPTURE(c10::toString(dtype));
    const wan::Fp8Weight q = wan::quantize_fp8(weights({48, 128}, 9));
    torch::manual_seed(11);
    const torch::Tensor bias = torch::randn({48}).to(dtype);
    const torch::Tensor input = torch::randn({5, 128}).to(dtype);
    const torch::Tensor grad = torch::randn({5, 48}).to(dtype);

    const torch::Tensor x = input.clone().requires_grad_(true), b = bias.clone().requires_grad_(true);
    const torch::Tensor y = wan::fp8_linear(x, q, b);
    y.backward(grad);
    const torch::Tensor x_ref = input.clone().requires_grad_(true), b_ref = bias.clone().requires_grad_(true);
    const torch::Tensor y_ref = torch::nn::functional::linear(x_ref, wan::dequantize_fp8(q, dtype), b_ref);
    y_ref.backward(grad);

    CHECK(torch::equal(y, y_ref));
    CHECK(torch::equal(x.grad(), x_ref.grad()));
    CHECK(torch::equal(b.grad(), b_ref.grad()));
    CHECK_FALSE(q.values.requires_grad());
  }
}
