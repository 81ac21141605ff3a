#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "tiny_dit.hpp"
#include "wan/wan_config.hpp"
#include "wan/wan_dit.hpp"
#include "wanfw/error.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

using Inputs = wanfw::testing::TinyInputs;
using wanfw::testing::random_tiny_dit;
using wanfw::testing::tiny_inputs;

/// Every parameter's gradient after backward of the sum of squares of the output.
std::map<std::string, torch::Tensor> gradients(wan::WanDiT& dit, const Inputs& in) {
  dit->zero_grad();
  dit->forward(in.x, in.t, in.context).pow(2).sum().backward();
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : dit->named_parameters()) out[p.key()] = p.value().grad().clone();
  return out;
}

double max_relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max() / b.to(torch::kFloat32).abs().max()).item<double>();
}

}  // namespace

TEST_CASE("a cloned Wan DiT computes the same output with weights of its own") {
  wan::WanDiT dit = random_tiny_dit();
  const auto clone = std::dynamic_pointer_cast<wan::WanDiTImpl>(dit->clone());
  REQUIRE(clone != nullptr);
  const Inputs in = tiny_inputs(dit->config());
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(dit->forward(in.x, in.t, in.context), clone->forward(in.x, in.t, in.context)));
  CHECK(clone->named_parameters().size() == dit->named_parameters().size());
  clone->blocks[0]->as<wan::WanBlock>()->self_attn->q->weight.add_(1.0);
  CHECK_FALSE(torch::equal(dit->blocks[0]->as<wan::WanBlock>()->self_attn->q->weight,
                           clone->blocks[0]->as<wan::WanBlock>()->self_attn->q->weight));
}

TEST_CASE("gradient checkpointing gives the gradients of the plain backward") {
  wan::WanDiT dit = random_tiny_dit();
  const Inputs in = tiny_inputs(dit->config());
  const auto plain = gradients(dit, in);
  dit->set_gradient_checkpointing(true);
  const auto recomputed = gradients(dit, in);
  REQUIRE(plain.size() == recomputed.size());
  for (const auto& [name, grad] : plain) {
    INFO(name);
    // Only the summation order of the shared inputs' gradients differs.
    CHECK(max_relative_difference(recomputed.at(name), grad) < 1e-6);
  }
}

TEST_CASE("gradient checkpointing leaves frozen parameters without gradients") {
  wan::WanDiT dit = random_tiny_dit();
  dit->set_gradient_checkpointing(true);
  for (auto& p : dit->blocks[0]->parameters()) p.requires_grad_(false);
  const Inputs in = tiny_inputs(dit->config());
  dit->forward(in.x, in.t, in.context).pow(2).sum().backward();
  for (auto& p : dit->blocks[0]->parameters()) CHECK_FALSE(p.grad().defined());
  CHECK(dit->blocks[1]->as<wan::WanBlock>()->ffn->parameters()[0].grad().abs().sum().item<double>() > 0);
}

TEST_CASE("gradient checkpointing recomputes under the forward's autocast") {
  wan::WanDiT dit = random_tiny_dit();
  const Inputs in = tiny_inputs(dit->config());
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  const auto plain = gradients(dit, in);
  dit->set_gradient_checkpointing(true);
  const auto recomputed = gradients(dit, in);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  for (const auto& [name, grad] : plain) {
    INFO(name);
    // The blocks repeat the same bf16 arithmetic; the text embedding's gradient is a bf16 sum over
    // the blocks taken in another order, so it agrees to bf16 precision (2^-8) only.
    const double tolerance = name.starts_with("blocks.") ? 1e-6 : 1.6e-2;
    CHECK(max_relative_difference(recomputed.at(name), grad) < tolerance);
  }
}

TEST_CASE("the DiT in bfloat16 matches float32 within bfloat16 precision") {
  wan::WanDiT dit = random_tiny_dit();
  const Inputs in = tiny_inputs(dit->config());
  torch::NoGradGuard no_grad;
  const torch::Tensor reference = dit->forward(in.x, in.t, in.context);
  dit->to(torch::kBFloat16);
  const torch::Tensor low = dit->forward(in.x.to(torch::kBFloat16), in.t, in.context.to(torch::kBFloat16));
  CHECK((low.scalar_type() == torch::kBFloat16));
  CHECK(max_relative_difference(low, reference) < 0.05);
}

TEST_CASE("a context shorter than text_len gives exactly the output of its zero-padded copy") {
  wan::WanDiT dit = random_tiny_dit();
  const Inputs in = tiny_inputs(dit->config());  // 5 tokens; the tiny preset pads to 16
  REQUIRE(in.context.size(1) < dit->config().text_len);
  const torch::Tensor padded =
      torch::cat({in.context, torch::zeros({2, dit->config().text_len - in.context.size(1), dit->config().text_dim})}, 1);
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(dit->forward(in.x, in.t, in.context), dit->forward(in.x, in.t, padded)));
}

TEST_CASE("a context longer than text_len is refused") {
  wan::WanDiT dit = random_tiny_dit();
  const Inputs in = tiny_inputs(dit->config());
  const torch::Tensor longer = torch::randn({2, dit->config().text_len + 1, dit->config().text_dim});
  torch::NoGradGuard no_grad;
  CHECK_THROWS_WITH_AS(dit->forward(in.x, in.t, longer),
                       doctest::Contains("the text context has 17 tokens, more than the model's text_len 16"),
                       wanfw::Error);
}
