// The run's optimizer: ATen's fused AdamW kernel against torch::optim::AdamW's per-tensor loop
// (the reference), and checkpoints that resume under either.
#include <torch/torch.h>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_store.hpp"
#include "temp_dir.hpp"
#include "optimizer/training_optimizer.hpp"
#include "wanfw/strategy.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

/// Two layers of odd widths and a scalar, in two groups with their own decay and betas: the shapes
/// and settings a fused kernel could get wrong that a single square matrix would not show.
struct TwoLayers : Model {
  explicit TwoLayers(c10::Device device = c10::kCPU) {
    torch::manual_seed(3);
    first = holder->register_module("first", torch::nn::Linear(7, 13));
    second = holder->register_module("second", torch::nn::Linear(13, 5));
    gain = holder->register_parameter("gain", torch::ones({}));
    holder->to(device);
  }
  std::shared_ptr<torch::nn::Module> module() override { return holder; }
  std::vector<FieldSpec> batch_fields() const override { return {{"x", {7}}, {"y", {5}}}; }
  StepOutput training_step(const Batch& batch) override {
    const at::Tensor out = second(torch::gelu(first(batch.at("x")))) * gain;
    return {(out - batch.at("y")).pow(2).mean(), {}};
  }
  std::vector<ParameterGroup> parameter_groups() override {
    ParameterGroup matrices, rest;
    matrices.name = "matrices";
    rest.name = "rest";
    rest.weight_decay = 0.0;
    rest.beta1 = 0.8;
    rest.beta2 = 0.95;
    rest.lr_scale = 0.5;
    for (const auto& item : holder->named_parameters())
      (item.value().dim() == 2 ? matrices : rest).parameters.emplace_back(item.key(), item.value());
    return {matrices, rest};
  }

  std::shared_ptr<torch::nn::Module> holder = std::make_shared<torch::nn::Module>();
  torch::nn::Linear first{nullptr}, second{nullptr};
  at::Tensor gain;
};

OptimizerSettings settings(const std::string& implementation) {
  OptimizerSettings s;
  s.lr = 3e-2;
  s.weight_decay = 0.1;
  s.implementation = implementation;
  return s;
}

/// Optimizer steps `first` to `last` (1-based) on batches that depend only on the step, with a
/// learning rate that changes every step.
void train(TwoLayers& model, TrainingOptimizer& optimizer, int first, int last) {
  for (int step = first; step <= last; ++step) {
    const auto generator = at::detail::createCPUGenerator(static_cast<std::uint64_t>(step));
    Batch batch;
    const c10::Device device = model.gain.device();
    batch.fields["x"] = at::randn({6, 7}, generator).to(device);
    batch.fields["y"] = at::randn({6, 5}, generator).to(device);
    optimizer.zero_grad();
    model.training_step(batch).loss.backward();
    optimizer.set_learning_rate(3e-2 * (1.0 - 0.03 * step));
    optimizer.step();
  }
}

std::vector<at::Tensor> values(TwoLayers& model) {
  std::vector<at::Tensor> v;
  for (const auto& p : model.holder->parameters()) v.push_back(p.detach().clone());
  return v;
}

/// ||a - b|| / ||b|| over every tensor together.
double relative_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double difference = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference += (a[i].to(at::kDouble) - b[i].to(at::kDouble)).pow(2).sum().item<double>();
    norm += b[i].to(at::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(difference / norm);
}

bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return a.size() == b.size();
}

struct OneProcess final : Strategy {
  std::string describe() const override { return "one process"; }
  void setup(Model&) override {}
  c10::Device device() const override { return c10::kCPU; }
};

/// Trains `steps` steps with `implementation` on `device`, from the start.
std::vector<at::Tensor> trained_on(c10::Device device, const std::string& implementation, int steps) {
  TwoLayers model(device);
  TrainingOptimizer optimizer(model.parameter_groups(), settings(implementation));
  train(model, optimizer, 1, steps);
  return values(model);
}

/// Trains `steps` steps with `implementation`, restoring the checkpoint at `resume` first when given.
std::vector<at::Tensor> trained(const std::string& implementation, int steps, const std::filesystem::path* resume = nullptr,
                                const std::filesystem::path* save_to = nullptr, int save_at = 0) {
  TwoLayers model;
  TrainingOptimizer optimizer(model.parameter_groups(), settings(implementation));
  int first = 1;
  if (resume != nullptr) {
    const auto checkpoint = Checkpoint::open(*resume);
    checkpoint->load_weights(model);
    OneProcess one_process;
    checkpoint->load_training_state(model, optimizer.adamw(), one_process);
    first = static_cast<int>(checkpoint->state().step) + 1;
  }
  if (save_to != nullptr) {
    train(model, optimizer, first, save_at);
    TrainerState state;
    state.step = save_at;
    CheckpointStore(*save_to).save(state, model, optimizer.adamw(), 0);
    first = save_at + 1;
  }
  train(model, optimizer, first, steps);
  return values(model);
}

}  // namespace

TEST_CASE("ATen's fused AdamW kernel is found for CPU tensors, and auto chooses it there") {
  CHECK(TrainingOptimizer::fused_kernel_available(c10::DeviceType::CPU));
  TwoLayers model;
  TrainingOptimizer automatic(model.parameter_groups(), settings("auto"));
  CHECK(automatic.fused());
  CHECK(automatic.describe() == "AdamW: ATen's fused multi-tensor kernel (cpu)");
  TrainingOptimizer reference(model.parameter_groups(), settings("per_tensor"));
  CHECK_FALSE(reference.fused());
}

// Both compute AdamW in fp32 from the same gradients; they differ in the order of a handful of
// operations per element (a few ulps of each update, ~2^-22 of lr). Over 20 steps with lr 3e-2
// that is ~20 * 3e-2 * 2.4e-7 = 1.4e-7 absolute on weights of norm ~1 (gradients then differ by
// as little): within the 1e-6 relative the issue sets, on every vector unit.
TEST_CASE("the fused AdamW kernel ends within 1e-6 of torch::optim::AdamW after 20 steps with two parameter groups") {
  const auto start = values(*std::make_unique<TwoLayers>());
  const auto fused = trained("fused", 20);
  const auto reference = trained("per_tensor", 20);
  const double difference = relative_difference(fused, reference);
  MESSAGE("fused vs per-tensor after 20 steps: relative difference " << difference);
  CHECK(difference < 1e-6);
  CHECK(relative_difference(reference, start) > 1e-2);  // the steps moved the weights by far more
}

TEST_CASE("a checkpoint of the fused optimizer resumes bitwise under it and within rounding under the per-tensor loop") {
  testing::TempDir dir;
  const std::filesystem::path run = dir.path();
  const auto uninterrupted = trained("fused", 20);
  trained("fused", 10, nullptr, &run, 10);
  const auto folder = CheckpointStore(run).latest();
  REQUIRE(folder.has_value());
  CHECK(bitwise_equal(trained("fused", 20, &*folder), uninterrupted));
  const auto switched = trained("per_tensor", 20, &*folder);
  CHECK(relative_difference(switched, uninterrupted) < 1e-6);
  CHECK_FALSE(bitwise_equal(switched, uninterrupted));  // the per-tensor loop really ran
}

// The same comparison on a GPU, where the fused kernel is CUDA's (ATen's _fused_adamw_ for CUDA
// tensors): the same few ulps of each update, so the same bound.
TEST_CASE("on a GPU the fused AdamW kernel ends within 1e-6 of torch::optim::AdamW after 20 steps" *
          doctest::test_suite("cuda")) {
  const c10::Device gpu(c10::kCUDA, 0);
  CHECK(TrainingOptimizer::fused_kernel_available(c10::DeviceType::CUDA));
  TwoLayers model(gpu);
  CHECK(TrainingOptimizer(model.parameter_groups(), settings("auto")).describe() ==
        "AdamW: ATen's fused multi-tensor kernel (cuda)");
  const auto start = values(*std::make_unique<TwoLayers>(gpu));
  const auto fused = trained_on(gpu, "fused", 20);
  const auto reference = trained_on(gpu, "per_tensor", 20);
  const double difference = relative_difference(fused, reference);
  MESSAGE("CUDA: fused vs per-tensor after 20 steps: relative difference " << difference);
  CHECK(difference < 1e-6);
  CHECK(relative_difference(reference, start) > 1e-2);
  CHECK(fused.front().is_cuda());
}
