// The fused block ops against the exact values (float64) of the math the official model writes,
// each within the float32 rounding bound of its arithmetic; and the composite reference within
// the same bound, so both are held to one standard.
#include <mutex>
#include <set>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "wan/block_ops.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

constexpr double kUnitRoundoff = 5.9604644775390625e-08;  // 2^-24, float32

torch::Tensor f64(const torch::Tensor& t) { return t.detach().to(torch::kFloat64); }

/// Largest |got - exact| / bound over the elements: at most 1 when `got` is within its bound.
double bound_ratio(const torch::Tensor& got, const torch::Tensor& exact, const torch::Tensor& bound) {
  return ((f64(got) - exact).abs() / (bound + 1e-300)).max().item<double>();
}

struct Grads {
  torch::Tensor y;
  std::vector<torch::Tensor> grads;
};

template <class Op>
Grads run(Op&& op, std::vector<torch::Tensor> inputs, const torch::Tensor& g) {
  for (auto& t : inputs) t = t.detach().clone().requires_grad_(true);
  torch::Tensor y = op(inputs);
  y.backward(g);
  Grads out{y.detach(), {}};
  for (const auto& t : inputs) out.grads.push_back(t.grad());
  return out;
}

}  // namespace

TEST_CASE("fused RMSNorm is within float32 rounding of the exact norm, forward and backward") {
  torch::manual_seed(11);
  const std::int64_t dim = 100;  // not a multiple of the kernels' 16 lanes: the tail is covered
  const torch::Tensor x = torch::randn({2, 70, dim}) * 3, weight = torch::randn({dim}), g = torch::randn({2, 70, dim});
  const double eps = 1e-6;
  // Exact: y = x r w, r = (mean x^2 + eps)^-1/2; dx = r (g w - n mean(g w n)), n = x r; dw = sum g n.
  const torch::Tensor xd = f64(x), wd = f64(weight), gd = f64(g);
  const torch::Tensor r = torch::rsqrt(xd.pow(2).mean(-1, true) + eps), n = xd * r;
  const torch::Tensor y = n * wd;
  const torch::Tensor gw = gd * wd;
  const torch::Tensor dx = r * (gw - n * (gw * n).mean(-1, true));
  const torch::Tensor dw = (gd * n).sum(at::IntArrayRef{0, 1});
  // Bounds: a sum of `dim` terms is off by at most dim u of the sum of their magnitudes; r then
  // by (dim/2 + 3) u relative; each product adds u. Doubled for slack in the constants.
  const double d = static_cast<double>(dim), rows = 140.0;
  const torch::Tensor y_bound = 2 * (d / 2 + 6) * kUnitRoundoff * y.abs();
  const torch::Tensor dx_bound =
      2 * (2 * d + 8) * kUnitRoundoff * r * (gw.abs() + n.abs() * (gw * n).abs().mean(-1, true));
  const torch::Tensor dw_bound = 2 * (rows + d + 8) * kUnitRoundoff * (gd * n).abs().sum(at::IntArrayRef{0, 1});

  const auto fused = run([&](auto& in) { return wan::rms_norm(in[0], in[1], eps); }, {x, weight}, g);
  const auto composite = run([&](auto& in) { return wan::reference::rms_norm(in[0], in[1], eps); }, {x, weight}, g);
  for (const auto* out : {&fused, &composite}) {
    CHECK(bound_ratio(out->y, y, y_bound) <= 1.0);
    CHECK(bound_ratio(out->grads[0], dx, dx_bound) <= 1.0);
    CHECK(bound_ratio(out->grads[1], dw, dw_bound) <= 1.0);
  }
}

TEST_CASE("fused GELU (tanh) is within float32 rounding of the exact activation, forward and backward") {
  torch::manual_seed(12);
  torch::Tensor x = torch::cat({torch::randn({4000}) * 4, torch::tensor({0.0f, -0.0f, 12.0f, -12.0f, 40.0f, -40.0f})});
  const torch::Tensor g = torch::randn_like(x);
  // Exact: y = x s, s = sigmoid(2u) = (1 + tanh u) / 2, u = k (x + c x^3).
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  const torch::Tensor xd = f64(x), gd = f64(g);
  const torch::Tensor u = k * (xd + c * xd.pow(3)), s = torch::sigmoid(2 * u);
  const torch::Tensor y = xd * s;
  const torch::Tensor dx = gd * (s + xd * s * (1 - s) * 2 * k * (1 + 3 * c * xd.pow(2)));
  // u carries ~4 roundings, so 2u is off by 4u|2u| absolute, and s by s(1-s) times that; exp,
  // the sum and the division add a few u more. The backward's extra products likewise.
  const torch::Tensor z = (2 * u).abs();
  const torch::Tensor dx_scale = s + xd.abs() * s * (1 - s) * 2 * k * (1 + 3 * c * xd.pow(2));
  // Below e^-87 the kernel's exp flushes to 0 (s = 0 where the exact s < 1.7e-38).
  const double flushed = 1.7e-38;
  const torch::Tensor y_bound = 2 * (8 + 4 * z) * kUnitRoundoff * y.abs() + flushed * xd.abs();
  const torch::Tensor dx_bound = 2 * (16 + 8 * z) * kUnitRoundoff * gd.abs() * dx_scale +
                                 flushed * gd.abs() * (1 + xd.abs() * 2 * k * (1 + 3 * c * xd.pow(2)));
  // The composite's 1 + tanh(u) cancels for u < 0: tanh's rounding (u) stays as an absolute error
  // of u|x| in y, and of u|g| (1 + |x| du) in dx (1 - tanh^2 cancels alike).
  const torch::Tensor composite_y_bound = y_bound + 2 * kUnitRoundoff * xd.abs();
  const torch::Tensor composite_dx_bound =
      dx_bound + 4 * kUnitRoundoff * gd.abs() * (1 + xd.abs() * 2 * k * (1 + 3 * c * xd.pow(2)));

  const auto fused = run([](auto& in) { return wan::gelu_tanh(in[0]); }, {x}, g);
  const auto composite = run([](auto& in) { return wan::reference::gelu_tanh(in[0]); }, {x}, g);
  CHECK(bound_ratio(fused.y, y, y_bound) <= 1.0);
  CHECK(bound_ratio(fused.grads[0], dx, dx_bound) <= 1.0);
  CHECK(bound_ratio(composite.y, y, composite_y_bound) <= 1.0);
  CHECK(bound_ratio(composite.grads[0], dx, composite_dx_bound) <= 1.0);
  CHECK(torch::isfinite(fused.grads[0]).all().item<bool>());
}

TEST_CASE("fused modulated LayerNorm is within float32 rounding of the exact value, per sample and per token") {
  torch::manual_seed(13);
  const std::int64_t batch = 2, tokens = 150, dim = 48;
  for (const std::int64_t modulation_rows : {std::int64_t{1}, tokens}) {
    CAPTURE(modulation_rows);
    const torch::Tensor x = torch::randn({batch, tokens, dim}) * 2 + 0.5;
    const torch::Tensor scale = torch::randn({batch, modulation_rows, dim}) * 0.3;
    const torch::Tensor shift = torch::randn({batch, modulation_rows, dim});
    const torch::Tensor g = torch::randn({batch, tokens, dim});
    const double eps = 1e-6;
    const torch::Tensor xd = f64(x), cd = f64(scale), hd = f64(shift), gd = f64(g);
    const torch::Tensor mean = xd.mean(-1, true);
    const torch::Tensor r = torch::rsqrt((xd - mean).pow(2).mean(-1, true) + eps), x_hat = (xd - mean) * r;
    const torch::Tensor y = x_hat * (1 + cd) + hd;
    const torch::Tensor gs = gd * (1 + cd);
    const torch::Tensor dx = r * (gs - gs.mean(-1, true) - x_hat * (gs * x_hat).mean(-1, true));
    auto to_modulation = [&](const torch::Tensor& t) { return modulation_rows == 1 ? t.sum(1, true) : t; };
    const torch::Tensor dscale = to_modulation(gd * x_hat), dshift = to_modulation(gd);
    // x_hat: the mean and variance sums are off by dim u relative to sums of magnitudes, which
    // |x| / sigma turns into an error of (dim + 6) u (1 + |x| r) on x_hat; the rest adds a few u.
    const double d = static_cast<double>(dim), rows = static_cast<double>(tokens);
    const torch::Tensor x_hat_error = (d + 6) * kUnitRoundoff * (1 + (xd.abs() + mean.abs()) * r);
    const torch::Tensor y_bound = 2 * (x_hat_error * (1 + cd).abs() + 4 * kUnitRoundoff * (y.abs() + hd.abs()));
    const torch::Tensor dx_bound =
        2 * (2 * d + 8) * kUnitRoundoff * r *
            (gs.abs() + gs.abs().mean(-1, true) + x_hat.abs() * (gs * x_hat).abs().mean(-1, true)) +
        2 * x_hat_error * r * (gs * x_hat).abs().mean(-1, true);
    const torch::Tensor dscale_bound =
        2 * to_modulation((rows + 4) * kUnitRoundoff * (gd * x_hat).abs() + gd.abs() * x_hat_error);
    const torch::Tensor dshift_bound = 2 * to_modulation((rows + 1) * kUnitRoundoff * gd.abs());

    auto op = [&](auto& in) { return wan::modulated_layer_norm(in[0], in[1], in[2], eps); };
    auto reference = [&](auto& in) { return wan::reference::modulated_layer_norm(in[0], in[1], in[2], eps); };
    const auto fused = run(op, {x, scale, shift}, g);
    const auto composite = run(reference, {x, scale, shift}, g);
    for (const auto* out : {&fused, &composite}) {
      CHECK(bound_ratio(out->y, y, y_bound) <= 1.0);
      CHECK(bound_ratio(out->grads[0], dx, dx_bound) <= 1.0);
      CHECK(bound_ratio(out->grads[1], dscale, dscale_bound) <= 1.0);
      CHECK(bound_ratio(out->grads[2], dshift, dshift_bound) <= 1.0);
    }
  }
}

TEST_CASE("at::parallel_for in wanfw's code runs on LibTorch's intra-op threads") {
  // LibTorch's parallel loop is a header template that uses its (OpenMP) threads only in units
  // compiled with OpenMP; wanfw::torch compiles every unit so. Without it, the loop would run the
  // whole range on the calling thread and the test below would compare one thread with itself.
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  std::mutex mutex;
  std::set<int> seen;
  at::parallel_for(0, 2, 1, [&](std::int64_t, std::int64_t) {
    const std::lock_guard<std::mutex> lock(mutex);
    seen.insert(at::get_thread_num());
  });
  at::set_num_threads(threads);
  CHECK(seen == std::set<int>{0, 1});
}

TEST_CASE("the fused ops give the same bits on one thread as on several") {
  torch::manual_seed(14);
  const torch::Tensor x = torch::randn({3, 400, 128}), weight = torch::randn({128}), g = torch::randn({3, 400, 128});
  const torch::Tensor scale = torch::randn({3, 1, 128}), shift = torch::randn({3, 1, 128});
  auto all = [&] {
    std::vector<torch::Tensor> out;
    for (const auto& r :
         {run([&](auto& in) { return wan::rms_norm(in[0], in[1], 1e-6); }, {x, weight}, g),
          run([&](auto& in) { return wan::gelu_tanh(in[0]); }, {x}, g),
          run([&](auto& in) { return wan::modulated_layer_norm(in[0], in[1], in[2], 1e-6); }, {x, scale, shift}, g)}) {
      out.push_back(r.y);
      out.insert(out.end(), r.grads.begin(), r.grads.end());
    }
    return out;
  };
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = all();
  at::set_num_threads(std::max(2, threads));
  const auto several = all();
  at::set_num_threads(threads);
  REQUIRE(one.size() == several.size());
  for (std::size_t i = 0; i < one.size(); ++i) CHECK(torch::equal(one[i], several[i]));
}

TEST_CASE("the block ops keep the composite path for tensors the fused kernels do not take") {
  const torch::Tensor x = torch::randn({2, 5, 32}, torch::kFloat64);
  CHECK_FALSE(wan::fused_block_ops(x));
  CHECK(wan::fused_block_ops(x.to(torch::kFloat32)));
  CHECK_FALSE(wan::fused_block_ops(x.to(torch::kBFloat16)));
  const torch::Tensor w = torch::randn({32}, torch::kFloat64);
  CHECK(torch::equal(wan::rms_norm(x, w, 1e-6), wan::reference::rms_norm(x, w, 1e-6)));
  CHECK(torch::equal(wan::gelu_tanh(x), wan::reference::gelu_tanh(x)));
  CHECK_THROWS_WITH_AS(wan::modulated_layer_norm(x, torch::zeros({2, 3, 32}), torch::zeros({2, 3, 32}), 1e-6),
                       doctest::Contains("scale and shift [B, 1, dim] or [B, L, dim]"), std::exception);
}
