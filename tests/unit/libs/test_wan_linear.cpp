// The DiT's adaptable linear layers: a plain linear map, and with a low-rank adapter attached
// y = x W^T + b + (alpha / rank) x A^T B^T under the adapter files' names.

#include <torch/torch.h>

#include "wan/wan_linear.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

TEST_CASE("a WanLinear without an adapter is torch's linear under the official names") {
  torch::manual_seed(1);
  wan::WanLinear layer(6, 4);
  const torch::Tensor x = torch::randn({3, 5, 6});
  CHECK(torch::equal(layer(x), torch::nn::functional::linear(x, layer->weight, layer->bias)));
  std::vector<std::string> names;
  for (const auto& p : layer->named_parameters()) names.push_back(p.key());
  CHECK(names == std::vector<std::string>{"weight", "bias"});
}

TEST_CASE("a WanLinear draws its initial weights as torch::nn::Linear does") {
  torch::manual_seed(7);
  torch::nn::Linear reference(6, 4);
  torch::manual_seed(7);
  wan::WanLinear layer(6, 4);
  CHECK(torch::equal(layer->weight, reference->weight));
  CHECK(torch::equal(layer->bias, reference->bias));
}

TEST_CASE("an attached adapter starts as no change and adds (alpha / rank) x A^T B^T") {
  torch::manual_seed(2);
  wan::WanLinear layer(6, 4);
  const torch::Tensor x = torch::randn({2, 6});
  const torch::Tensor before = layer(x);
  layer->attach_lora({/*rank=*/2, /*alpha=*/8.0, /*dropout=*/0.0}, torch::kFloat32);
  CHECK(torch::equal(layer(x), before));  // B starts at zero
  {
    torch::NoGradGuard no_grad;
    layer->lora_B->weight.normal_();
  }
  const torch::Tensor expected =
      before + 4.0 * torch::matmul(torch::matmul(x, layer->lora_A->weight.t()), layer->lora_B->weight.t());
  CHECK(torch::allclose(layer(x), expected, 1e-6, 1e-6));
  std::vector<std::string> names;
  for (const auto& p : layer->named_parameters()) names.push_back(p.key());
  CHECK(names == std::vector<std::string>{"weight", "bias", "lora_A.weight", "lora_B.weight"});
  CHECK((layer->lora_A->weight.sizes() == torch::IntArrayRef({2, 6})));
  CHECK((layer->lora_B->weight.sizes() == torch::IntArrayRef({4, 2})));
}

TEST_CASE("a cloned WanLinear keeps its adapter and its values") {
  wan::WanLinear layer(6, 4);
  layer->attach_lora({3, 3.0, 0.0}, torch::kFloat32);
  {
    torch::NoGradGuard no_grad;
    layer->lora_B->weight.normal_();
  }
  auto copy = std::dynamic_pointer_cast<wan::WanLinearImpl>(layer->clone());
  REQUIRE(copy);
  CHECK(copy->has_lora());
  const torch::Tensor x = torch::randn({2, 6});
  CHECK(torch::equal(copy->forward(x), layer(x)));
}
