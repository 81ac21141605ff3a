// A Wan DiT on an fp8 frozen base (WanPlacement::fp8_base, WanLinearImpl::quantize_base): the
// blocks' Linear weights stored in e4m3 with float32 scales, everything else in the compute
// dtype; outputs exactly those of the model whose weights are the dequantized values, and within
// the first-order bound that e4m3's rounding allows of the wider model's.

#include <cmath>
#include <map>
#include <string>

#include <torch/torch.h>

#include "fp8_scales.hpp"
#include "temp_dir.hpp"
#include "tiny_dit.hpp"
#include "wan/lora.hpp"
#include "wan/wan_dit.hpp"
#include "wan/wan_weights.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

using Inputs = wanfw::testing::TinyInputs;
using wanfw::testing::random_tiny_dit;
using wanfw::testing::tiny_inputs;

/// The blocks' Linear layers, by name.
std::map<std::string, wan::WanLinearImpl*> block_linears(wan::WanDiTImpl& dit) {
  std::map<std::string, wan::WanLinearImpl*> out;
  for (const auto& item : dit.blocks->named_modules("blocks"))
    if (auto* layer = item.value()->as<wan::WanLinearImpl>()) out[item.key()] = layer;
  return out;
}

/// A copy of `dit` with its blocks' Linear weights quantized.
std::shared_ptr<wan::WanDiTImpl> quantized(const wan::WanDiT& dit) {
  auto copy = std::dynamic_pointer_cast<wan::WanDiTImpl>(dit->clone());
  for (auto& [name, layer] : block_linears(*copy)) layer->quantize_base();
  return copy;
}

torch::Tensor predict(wan::WanDiTImpl& dit, const Inputs& in) {
  torch::NoGradGuard no_grad;
  dit.eval();
  return dit.forward(in.x, in.t, in.context);
}

}  // namespace

TEST_CASE("an fp8 base stores the blocks' Linear weights in e4m3 and keeps every other weight in the compute dtype") {
  wan::WanDiT dit(wan::wan_preset("tiny"), wan::WanPlacement{torch::kCPU, torch::kBFloat16, /*fp8_base=*/true});
  const auto linears = block_linears(*dit);
  REQUIRE(linears.size() == 20);
  for (const auto& p : dit->named_parameters()) {
    const std::string& name = p.key();
    const bool base = linears.count(name.substr(0, name.rfind('.'))) > 0 && !name.ends_with(".bias");
    INFO(name);
    if (name.ends_with(".weight_scale")) {
      CHECK((p.value().scalar_type() == torch::kFloat32));
    } else {
      CHECK((p.value().scalar_type() == (base ? at::kFloat8_e4m3fn : torch::kBFloat16)));
    }
    CHECK(p.value().requires_grad() == !base);
  }
  // Block-64 scales along the input where 64 divides it (tiny: dim 48, ffn 96), per channel elsewhere.
  CHECK((linears.at("blocks.0.ffn.2")->weight_scale.sizes() == torch::IntArrayRef({48, 1})));
  CHECK((linears.at("blocks.0.self_attn.q")->weight_scale.sizes() == torch::IntArrayRef({48, 1})));
  wan::WanLinear wide(128, 8);
  wide->quantize_base();
  CHECK((wide->weight_scale.sizes() == torch::IntArrayRef({8, 2, 1})));
}

TEST_CASE("the fp8 base keeps its dtype when the model is moved, cast or cloned") {
  wan::WanDiT dit(wan::wan_preset("tiny"), wan::WanPlacement{torch::kCPU, torch::kFloat32, /*fp8_base=*/true});
  auto* q = dit->blocks[0]->as<wan::WanBlock>()->self_attn->q.get();
  const torch::Tensor values = q->weight.clone(), scales = q->weight_scale.clone();
  dit->to(torch::kBFloat16);
  dit->to(torch::kCPU, torch::kBFloat16);
  CHECK((q->weight.scalar_type() == at::kFloat8_e4m3fn));
  CHECK((q->bias.scalar_type() == torch::kBFloat16));
  CHECK(torch::equal(q->weight_scale, scales));
  const auto copy = std::dynamic_pointer_cast<wan::WanDiTImpl>(dit->clone());
  auto* copied = copy->blocks[0]->as<wan::WanBlock>()->self_attn->q.get();
  CHECK(copied->fp8_base());
  CHECK_FALSE(copied->weight.requires_grad());
  CHECK(torch::equal(copied->weight.to(torch::kFloat32), values.to(torch::kFloat32)));
  CHECK(torch::equal(copied->weight_scale, scales));
  CHECK(copy->named_parameters().size() == dit->named_parameters().size());
}

TEST_CASE("predict on an fp8 base equals predict on the dequantized weights bitwise") {
  wan::WanDiT dit = random_tiny_dit();
  const auto fp8 = quantized(dit);
  auto dequantized = std::dynamic_pointer_cast<wan::WanDiTImpl>(dit->clone());
  {
    torch::NoGradGuard no_grad;
    const auto from = block_linears(*fp8);
    for (auto& [name, layer] : block_linears(*dequantized))
      layer->weight.copy_(wan::dequantize_fp8(from.at(name)->fp8_weight(), torch::kFloat32));
  }
  const Inputs in = tiny_inputs(dit->config());
  CHECK(torch::equal(predict(*fp8, in), predict(*dequantized, in)));
}

TEST_CASE("predict on an fp8 base stays within the first-order bound of e4m3 rounding of the float32 base's") {
  // Each weight moves by at most e = max(2^-4 |w|, 2^-10 s) (docs/low-memory.md), so to first order
  // the output moves by |sum_W g e| <= sum_W |g| e with g the gradient of s^T out, s = sign of the
  // difference: ||out_fp8 - out||_1 <= sum |g| e, plus terms of second order in 2^-4 (a factor
  // (1 + 2^-4)^k for k rounded weights in a path; the tiny DiT's paths have at most 4 products, so
  // 1.3 covers them).
  wan::WanDiT dit = random_tiny_dit();
  const auto fp8 = quantized(dit);
  const Inputs in = tiny_inputs(dit->config());
  const torch::Tensor wide = predict(*dit, in), narrow = predict(*fp8, in);
  const torch::Tensor sign = (narrow - wide).sign();
  dit->train();
  dit->zero_grad();
  (dit->forward(in.x, in.t, in.context) * sign).sum().backward();
  double bound = 0;
  const auto rounded = block_linears(*fp8);
  for (auto& [name, layer] : block_linears(*dit)) {
    const wan::Fp8Weight w = rounded.at(name)->fp8_weight();
    const torch::Tensor e = torch::maximum(std::ldexp(1.0, -4) * layer->weight.abs(),
                                           std::ldexp(1.0, -10) * fp8_element_scales(w));
    bound += (layer->weight.grad().abs() * e).sum().item<double>();
  }
  const double moved = (narrow - wide).abs().sum().item<double>();
  MESSAGE("||out_fp8 - out||_1 = " << moved << ", first-order bound " << bound);
  CHECK(moved > 0);
  CHECK(moved <= 1.3 * bound);
}

TEST_CASE("adapters train on an fp8 base and only they get gradients") {
  const auto dit = quantized(random_tiny_dit());  // random: the official init's zero head passes no gradient
  wan::LoraSettings lora;
  lora.rank = 4;
  lora.alpha = 4;
  lora.targets = {"blocks.*"};
  wan::attach_adapters(*dit, lora);
  const Inputs in = tiny_inputs(dit->config());
  torch::manual_seed(11);
  const torch::Tensor target = torch::randn({2, dit->config().out_dim, 3, 4, 4});
  std::vector<torch::Tensor> trained;
  for (const auto& p : dit->parameters())
    if (p.requires_grad()) trained.push_back(p);
  torch::optim::Adam adam(trained, torch::optim::AdamOptions(1e-2));
  const torch::Tensor base = dit->blocks[1]->as<wan::WanBlock>()->ffn[0]->as<wan::WanLinearImpl>()->weight.clone();
  dit->train();
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    adam.zero_grad();
    const torch::Tensor loss = (dit->forward(in.x, in.t, in.context) - target).pow(2).mean();
    loss.backward();
    adam.step();
    losses.push_back(loss.item<double>());
  }
  MESSAGE("loss " << losses.front() << " -> " << losses.back());
  CHECK(losses.back() < 0.9 * losses.front());
  for (const auto& p : dit->named_parameters()) {
    INFO(p.key());
    CHECK(p.value().grad().defined() == (p.key().find("lora_") != std::string::npos));
  }
  auto* ffn = dit->blocks[1]->as<wan::WanBlock>()->ffn[0]->as<wan::WanLinearImpl>();
  CHECK(torch::equal(ffn->weight.to(torch::kFloat32), base.to(torch::kFloat32)));
}

TEST_CASE("a float checkpoint loads into an fp8 base quantized tensor by tensor") {
  wan::WanDiT source = random_tiny_dit();
  const wanfw::testing::TempDir dir;
  wan::save_wan_weights(*source, dir.path(), "t2v", 1 << 30);
  wan::WanDiT dit(wan::wan_preset("tiny"), wan::WanPlacement{torch::kCPU, torch::kFloat32, /*fp8_base=*/true});
  wan::load_wan_weights(*dit, dir.path());
  const auto from = block_linears(*source);
  for (auto& [name, layer] : block_linears(*dit)) {
    INFO(name);
    const wan::Fp8Weight expected = wan::quantize_fp8(from.at(name)->weight);
    CHECK(torch::equal(layer->weight.to(torch::kFloat32), expected.values.to(torch::kFloat32)));
    CHECK(torch::equal(layer->weight_scale, expected.scales));
    CHECK(torch::equal(layer->bias, from.at(name)->bias));
  }
  CHECK(torch::equal(dit->head->head->weight, source->head->head->weight));
}

TEST_CASE("merging an adapter into an fp8 base gives a plain weight: the dequantized base plus the update") {
  wan::WanLinear layer(128, 8);
  layer->quantize_base();
  const torch::Tensor base = wan::dequantize_fp8(layer->fp8_weight(), torch::kFloat32);
  layer->attach_lora({2, 2.0, 0.0}, torch::kFloat32);
  {
    torch::NoGradGuard no_grad;
    layer->lora_B->weight.normal_();
  }
  const torch::Tensor delta = torch::matmul(layer->lora_B->weight, layer->lora_A->weight);
  layer->merge_lora();
  CHECK_FALSE(layer->fp8_base());
  CHECK((layer->weight.scalar_type() == torch::kFloat32));
  CHECK(torch::equal(layer->weight, base + delta));
  std::vector<std::string> names;
  for (const auto& p : layer->named_parameters()) names.push_back(p.key());
  CHECK(names == std::vector<std::string>{"weight", "bias"});
}
