// Master weights in host memory (optimizer.state host): the optimizer steps fp32 masters cut from
// one host arena, the module's gradients move to the masters' slots (each as soon as backward has
// accumulated it) and the updated values back, and the training ends where the optimizer over the
// parameters themselves ends, bit for bit.
#include <fmt/format.h>
#include <torch/torch.h>

#include "optimizer/training_optimizer.hpp"
#include "train/master_weights.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

/// Three blocks (the first run twice, as a model may reuse one) and a head.
struct ReusedBlocks : Model {
  ReusedBlocks() {
    torch::manual_seed(9);
    for (int i = 0; i < 3; ++i)
      blocks.push_back(holder->register_module(fmt::format("b{}", i), torch::nn::Linear(6, 6)));
    head = holder->register_module("head", torch::nn::Linear(6, 2));
  }
  std::shared_ptr<torch::nn::Module> module() override { return holder; }
  std::vector<FieldSpec> batch_fields() const override { return {}; }
  StepOutput training_step(const Batch& batch) override {
    at::Tensor x = batch.at("x");
    for (const std::size_t block : {0, 1, 0, 2}) x = torch::tanh(blocks[block]->forward(x));
    return {head->forward(x).pow(2).mean(), {}};
  }
  std::vector<ParameterGroup> parameter_groups() override {
    ParameterGroup all;
    all.name = "all";
    for (const auto& item : holder->named_parameters()) all.parameters.emplace_back(item.key(), item.value());
    return {all};
  }

  std::shared_ptr<torch::nn::Module> holder = std::make_shared<torch::nn::Module>();
  std::vector<torch::nn::Linear> blocks;
  torch::nn::Linear head{nullptr};
};

/// Five samples, drawn for `step`.
Batch reused_batch(int step = 0) {
  torch::manual_seed(static_cast<std::uint64_t>(4 + step));
  Batch batch;
  batch.fields["x"] = torch::randn({5, 6});
  return batch;
}

OptimizerSettings adamw() {
  OptimizerSettings s;
  s.lr = 3e-2;
  s.weight_decay = 0.1;
  s.implementation = "auto";
  return s;
}

std::vector<at::Tensor> values(ReusedBlocks& model) {
  std::vector<at::Tensor> v;
  for (const auto& p : model.holder->parameters()) v.push_back(p.detach().clone());
  return v;
}

}  // namespace

TEST_CASE("masters in host memory train the model to the weights of the optimizer on its parameters, bit for bit") {
  ReusedBlocks plain;
  TrainingOptimizer direct(plain.parameter_groups(), adamw());
  for (int step = 1; step <= 6; ++step) {
    direct.zero_grad();
    plain.training_step(reused_batch(step)).loss.backward();
    torch::nn::utils::clip_grad_norm_(direct.parameters(), 0.1);
    direct.step();
  }

  ReusedBlocks hosted;
  MasterWeights masters(hosted, std::nullopt, OptimizerStateHome::Host, c10::kCPU);
  TrainingOptimizer optimizer(masters.view().parameter_groups(), adamw());
  CHECK(optimizer.parameters().front().unsafeGetTensorImpl() != hosted.head->weight.unsafeGetTensorImpl());
  CHECK(masters.describe().find("their fp32 masters and gradients in ") != std::string::npos);
  for (int step = 1; step <= 6; ++step) {
    optimizer.zero_grad();
    hosted.training_step(reused_batch(step)).loss.backward();
    masters.take_gradients();
    CHECK_FALSE(hosted.head->bias.grad().defined());  // released from the module: the masters' slots hold them
    CHECK(optimizer.parameters().back().grad().defined());
    torch::nn::utils::clip_grad_norm_(optimizer.parameters(), 0.1);
    optimizer.step();
    masters.publish();
  }
  const auto expected = values(plain), got = values(hosted);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(torch::equal(got[i], expected[i]));
}

TEST_CASE("the host state's bytes are each master and gradient slot on 64-byte lines, and the moments beside them") {
  ReusedBlocks model;
  // Three 6x6 blocks with biases and a 6x2 head: 3 x (36 + 6) + 12 + 2 values; slots of 144, 24, 48
  // and 8 bytes rounded up to 64-byte lines.
  const double values = 3 * (36 + 6) + 12 + 2;
  const double arena = 2 * (3 * (192 + 64) + 64 + 64);
  CHECK(host_state_bytes(model, {}) == arena + 8 * values);
  EmaSettings ema;
  ema.decay = 0.99;
  CHECK(host_state_bytes(model, ema) == arena + 12 * values);
  ema.groups = {"another"};
  CHECK(host_state_bytes(model, ema) == arena + 8 * values);
}

TEST_CASE("each gradient moves to the host as soon as backward has accumulated it, whole") {
  ReusedBlocks plain;
  plain.training_step(reused_batch()).loss.backward();

  ReusedBlocks model;
  MasterWeights masters(model, std::nullopt, OptimizerStateHome::Host, c10::kCPU);
  masters.stream_gradients();
  CHECK(masters.describe().find("each gradient moves there as soon as it is whole") != std::string::npos);
  CHECK(masters.describe(/*gradients_final=*/false).find("the gradients move there when backward is over") !=
        std::string::npos);  // a strategy that reduces them after backward (ddp)
  // Not armed (an earlier micro-batch of an accumulated step): the gradients stay on the device.
  model.training_step(reused_batch()).loss.backward();
  CHECK(model.head->weight.grad().defined());
  for (auto& p : model.holder->parameters()) p.mutable_grad().reset();

  masters.stream_micro_batch(true);
  Batch batch = reused_batch();
  batch.fields["x"].requires_grad_(true);
  bool head_moved_while_backward_ran = false;  // the input's gradient comes last
  batch.fields["x"].register_hook([&](const at::Tensor& grad) {
    head_moved_while_backward_ran = !model.head->weight.grad().defined() && masters.has_gradient(model.head->weight);
    return grad;
  });
  model.training_step(batch).loss.backward();
  CHECK(head_moved_while_backward_ran);
  for (const auto& p : model.holder->parameters()) CHECK_FALSE(p.grad().defined());
  masters.take_gradients();
  // The moved gradients are the whole ones: block 0's holds both of its uses.
  const auto groups = masters.view().parameter_groups();
  const auto reference = plain.parameter_groups();
  for (std::size_t i = 0; i < groups[0].parameters.size(); ++i) {
    CAPTURE(groups[0].parameters[i].first);
    CHECK(torch::equal(groups[0].parameters[i].second.grad(), reference[0].parameters[i].second.grad()));
  }
}
