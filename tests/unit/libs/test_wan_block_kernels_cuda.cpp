// The block ops' fused CUDA kernels: which path a tensor takes (checked everywhere), and each
// kernel against the composite reference on random inputs of odd sizes, forward and every
// gradient, in float32 and bfloat16 (where a GPU is present).
#include <torch/torch.h>

#include "wan/block_ops.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

/// Largest |a - b| over the largest |b|, in float32.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.detach().to(torch::kFloat32), y = b.detach().to(torch::kFloat32);
  return ((x - y).abs().max() / y.abs().max().clamp_min(1e-30)).item<double>();
}

/// The output and the gradients of `inputs` of `op` for the upstream gradient `upstream`.
template <class Op>
std::vector<torch::Tensor> forward_and_gradients(Op&& op, std::vector<torch::Tensor> inputs,
                                                 const torch::Tensor& upstream) {
  for (auto& t : inputs) t = t.detach().clone().requires_grad_(t.is_floating_point());
  const torch::Tensor y = op(inputs);
  y.backward(upstream.to(y.scalar_type()));
  std::vector<torch::Tensor> out{y.detach()};
  for (const auto& t : inputs)
    if (t.requires_grad()) out.push_back(t.grad());
  return out;
}

}  // namespace

TEST_CASE("the block ops take the fused CPU kernels for float32 CPU tensors and the composite for other CPU dtypes") {
  CHECK(wan::block_ops_path(torch::zeros({2, 3}, torch::kFloat32)) == wan::BlockOpsPath::FusedCpu);
  CHECK(wan::block_ops_path(torch::zeros({2, 3}, torch::kBFloat16)) == wan::BlockOpsPath::Composite);
  CHECK(wan::block_ops_path(torch::zeros({2, 3}, torch::kFloat64)) == wan::BlockOpsPath::Composite);
  CHECK_FALSE(wan::cuda_kernel_serves("rms_norm", torch::zeros({2, 3})));
  // The gated residual and RoPE have no CPU kernels: on the CPU they are the composite, bit for bit.
  const torch::Tensor x = torch::randn({2, 7, 12}), y = torch::randn({2, 7, 12}), gate = torch::randn({2, 1, 12});
  CHECK(torch::equal(wan::gated_residual(x, y, gate), wan::reference::gated_residual(x, y, gate)));
  const torch::Tensor q = torch::randn({2, 7, 3, 12}), angles = torch::randn({7, 6});
  const torch::Tensor rotations = torch::polar(torch::ones_like(angles), angles);
  CHECK(torch::equal(wan::rope(q, rotations), wan::reference::rope(q, rotations)));
}

TEST_CASE("a build with the CUDA toolkit carries the fused CUDA kernels") {
  CHECK(wan::built_with_cuda_kernels() == static_cast<bool>(WANFW_EXPECT_CUDA_KERNELS));
}

TEST_CASE("every fused CUDA kernel equals its composite reference on odd sizes in float32 and bfloat16" *
          doctest::test_suite("cuda")) {
  REQUIRE(wan::built_with_cuda_kernels());
  const c10::Device gpu(c10::kCUDA, 0);
  torch::manual_seed(17);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    // float32: another order of the row sums (dim 136: ~1e-6); bfloat16: a few 2^-8 roundings.
    const double tolerance = dtype == torch::kFloat32 ? 2e-5 : 4e-2;
    const auto on = [&](torch::Tensor t, torch::ScalarType type) { return t.to(gpu, type); };
    const torch::Tensor x = on(torch::randn({3, 101, 136}), dtype), y = on(torch::randn({3, 101, 136}), dtype);
    const torch::Tensor g = on(torch::randn({3, 101, 136}), torch::kFloat32);
    struct Case {
      const char* op;
      std::function<torch::Tensor(std::vector<torch::Tensor>&)> fused, reference;
      std::vector<torch::Tensor> inputs;
      torch::Tensor upstream;
    };
    const torch::Tensor w = on(torch::randn({136}) * 0.1 + 1, dtype);
    const torch::Tensor per_sample = on(torch::randn({3, 1, 136}), torch::kFloat32);
    const torch::Tensor per_token = on(torch::randn({3, 101, 136}), torch::kFloat32);
    const torch::Tensor q = on(torch::randn({3, 101, 5, 24}), dtype), angles = on(torch::randn({101, 12}), torch::kFloat32);
    const torch::Tensor rotations = torch::polar(torch::ones_like(angles), angles);
    std::vector<Case> cases = {
        {"rms_norm", [](auto& t) { return wan::rms_norm(t[0], t[1], 1e-6); },
         [](auto& t) { return wan::reference::rms_norm(t[0], t[1], 1e-6); }, {x, w}, g},
        {"modulated_layer_norm", [](auto& t) { return wan::modulated_layer_norm(t[0], t[1], t[2], 1e-6); },
         [](auto& t) { return wan::reference::modulated_layer_norm(t[0], t[1], t[2], 1e-6); },
         {x, per_sample, per_sample * 0.5}, g},
        {"modulated_layer_norm", [](auto& t) { return wan::modulated_layer_norm(t[0], t[1], t[2], 1e-6); },
         [](auto& t) { return wan::reference::modulated_layer_norm(t[0], t[1], t[2], 1e-6); },
         {x, per_token, per_token * 0.5}, g},
        {"gated_residual", [](auto& t) { return wan::gated_residual(t[0], t[1], t[2]); },
         [](auto& t) { return wan::reference::gated_residual(t[0], t[1], t[2]); }, {x, y, per_sample}, g},
        {"gated_residual", [](auto& t) { return wan::gated_residual(t[0], t[1], t[2]); },
         [](auto& t) { return wan::reference::gated_residual(t[0], t[1], t[2]); }, {x, y, per_token}, g},
        {"rope", [&](auto& t) { return wan::rope(t[0], rotations); },
         [&](auto& t) { return wan::reference::rope(t[0], rotations); }, {q}, on(torch::randn({3, 101, 5, 24}), dtype)},
    };
    for (auto& c : cases) {
      CAPTURE(c.op);
      CAPTURE(c10::toString(dtype));
      REQUIRE(wan::cuda_kernel_serves(c.op, c.inputs[0]));  // the fused kernel ran, not the fallback
      const auto fused = forward_and_gradients(c.fused, c.inputs, c.upstream);
      const auto reference = forward_and_gradients(c.reference, c.inputs, c.upstream);
      REQUIRE(fused.size() == reference.size());
      for (std::size_t i = 0; i < fused.size(); ++i) {
        CAPTURE(i);
        CHECK((fused[i].scalar_type() == reference[i].scalar_type()));
        CHECK(relative_error(fused[i], reference[i]) < tolerance);
      }
    }
  }
}
