// Model `linear_regression` (test plugin): learns y = W* x + b* where W* and b* are drawn from
// `truth_seed`. A problem with a known answer: the metric `weight_error` (the distance to W*)
// must fall towards zero, and every strategy must produce the same updates.

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/plugin.hpp"

// Built twice (tests/plugins/CMakeLists.txt): as linear_regression, and as a model that declares no
// replication (ModelCapabilities), which the host must then keep from a replicating layout.
#ifndef LINEAR_NAME
#define LINEAR_NAME "linear_regression"
#endif
#ifndef DECLARES_REPLICATION
#define DECLARES_REPLICATION true
#endif

namespace {

/// Faults a test can plant (all off by default).
struct Faults {
  std::int64_t nan_at_call = 0;       ///< the loss becomes NaN on this call ...
  std::int64_t nan_rank = -1;         ///< ... in the process of this RANK (-1: every process)
  std::int64_t inf_grad_at_call = 0;  ///< the weight's gradient becomes inf on this call (loss finite)
  std::int64_t kill_rank = -1;        ///< the process of this RANK ...
  std::int64_t kill_at_call = 0;      ///< ... SIGKILLs itself on this call, in the first torchrun attempt only
};

struct LinearRegressionImpl : torch::nn::Module {
  /// With `frozen_state`: a frozen parameter `offset` and a buffer `steps_seen` that enter the
  /// output, so that a copy of the module that missed either computes something else.
  LinearRegressionImpl(std::int64_t in, std::int64_t out, bool frozen_state = false)
      : linear(register_module("linear", torch::nn::Linear(in, out))) {
    if (!frozen_state) return;
    offset = register_parameter("offset", torch::randn({out}), /*requires_grad=*/false);
    steps_seen = register_buffer("steps_seen", torch::zeros({}));
  }
  /// `train_weight`/`train_bias` false: that parameter enters detached (it gets no gradient).
  torch::Tensor forward(const torch::Tensor& x, bool train_weight = true, bool train_bias = true) {
    torch::Tensor y = torch::nn::functional::linear(x, train_weight ? linear->weight : linear->weight.detach(),
                                                    train_bias ? linear->bias : linear->bias.detach());
    if (offset.defined()) y = y + offset * (1 + 0.1 * steps_seen);
    return y;
  }
  torch::nn::Linear linear;
  torch::Tensor offset, steps_seen;
};
TORCH_MODULE(LinearRegression);

class LinearRegressionModel final : public wanfw::Model {
 public:
  LinearRegressionModel(std::int64_t in, std::int64_t out, std::uint64_t truth_seed, std::int64_t delay_ms,
                        Faults faults, double bias_lr_scale, bool frozen_state, std::int64_t bias_phase_steps,
                        bool stray_gradient)
      : module_(in, out, frozen_state), delay_ms_(delay_ms), faults_(faults), bias_lr_scale_(bias_lr_scale),
        frozen_state_(frozen_state), bias_phase_steps_(bias_phase_steps), stray_gradient_(stray_gradient) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(truth_seed);
    true_weight_ = at::randn({out, in}, generator);
    true_bias_ = at::randn({out}, generator);
    module_->linear->weight.register_hook([this](const torch::Tensor& g) -> torch::Tensor {
      if (!poison_next_gradient_) return {};  // unchanged
      poison_next_gradient_ = false;
      return g * INFINITY;
    });
  }

  std::shared_ptr<torch::nn::Module> module() override { return module_.ptr(); }

  /// With bias_lr_scale != 1 or phases: two groups, the weight ("weight") and the bias ("bias", its
  /// own learning-rate multiplier and no weight decay).
  std::vector<wanfw::ParameterGroup> parameter_groups() override {
    if (bias_lr_scale_ == 1.0 && bias_phase_steps_ == 0) return Model::parameter_groups();
    wanfw::ParameterGroup weight, bias;
    weight.name = "weight";
    weight.parameters = {{"linear.weight", module_->linear->weight}};
    bias.name = "bias";
    bias.parameters = {{"linear.bias", module_->linear->bias}};
    bias.lr_scale = bias_lr_scale_;
    bias.weight_decay = 0.0;
    return {weight, bias};
  }

  /// With bias_phase_steps N > 0: phase "weight" (one step) then phase "bias" (N steps), each
  /// training its own group.
  std::vector<wanfw::TrainingPhase> phases() override {
    if (bias_phase_steps_ == 0) return {};
    return {{"weight", {"weight"}, 1}, {"bias", {"bias"}, static_cast<int>(bias_phase_steps_)}};
  }
  void set_phase(int phase) override { phase_ = phase; }

  std::unique_ptr<wanfw::Model> replicate(const c10::Device& device) override {
    auto copy = std::make_unique<LinearRegressionModel>(*this);
    // Fresh weights of its own (the default generator has moved on): the strategy must copy the
    // model's parameters and buffers into it.
    copy->module_ = LinearRegression(module_->linear->options.in_features(), module_->linear->options.out_features(),
                                     frozen_state_);
    copy->module_->to(device);
    copy->faults_ = Faults{};  // faults are planted in the main replica only
    return copy;
  }

  std::vector<wanfw::FieldSpec> batch_fields() const override {
    return {{"x", {module_->linear->options.in_features()}, at::kFloat}};
  }

  wanfw::StepOutput training_step(const wanfw::Batch& batch) override {
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    ++calls_;
    const torch::Tensor x = batch.at("x");
    const torch::Tensor w = true_weight_.to(x.device()), b = true_bias_.to(x.device());
    const torch::Tensor target = torch::nn::functional::linear(x, w, b);
    // In a phase, the other phase's parameter enters detached (unless a test wants it to stray).
    const bool phased = bias_phase_steps_ > 0 && !stray_gradient_;
    torch::Tensor loss = torch::mse_loss(module_->forward(x, !phased || phase_ == 0, !phased || phase_ == 1), target);
    if (frozen_state_) {
      torch::NoGradGuard no_grad;
      module_->steps_seen.add_(1);  // one per micro-batch, on every replica alike
    }
    if (faults_.nan_at_call > 0 && calls_ == faults_.nan_at_call &&
        (faults_.nan_rank < 0 || env_int("RANK") == faults_.nan_rank))
      loss = loss * std::numeric_limits<float>::quiet_NaN();
    if (faults_.inf_grad_at_call > 0 && calls_ == faults_.inf_grad_at_call)
      poison_next_gradient_ = true;
    if (faults_.kill_rank >= 0 && calls_ == faults_.kill_at_call && env_int("RANK") == faults_.kill_rank &&
        env_int("TORCHELASTIC_RESTART_COUNT") == 0)
      std::raise(SIGKILL);
    const torch::Tensor error = (module_->linear->weight.detach() - w).norm();
    return {loss, {{"weight_error", error}}};
  }

 private:
  static std::int64_t env_int(const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? 0 : std::atoll(value);
  }

  LinearRegression module_;
  torch::Tensor true_weight_, true_bias_;
  std::int64_t delay_ms_;
  Faults faults_;
  double bias_lr_scale_ = 1.0;
  bool frozen_state_ = false;
  std::int64_t bias_phase_steps_ = 0;
  bool stray_gradient_ = false;
  int phase_ = 0;
  std::int64_t calls_ = 0;
  bool poison_next_gradient_ = false;
};

wanfw::PluginDescriptor describe() {
  using wanfw::option;
  using T = wanfw::OptionType;
  auto d = wanfw::PluginDescriptor::for_model(LINEAR_NAME, "1.0.0",
                                              "Test model: linear regression onto a hidden linear map.");
  d.model_capabilities.replicates = DECLARES_REPLICATION;
  d.options = {
      option("in_features", T::Integer).value("16").doc("Input width."),
      option("out_features", T::Integer).value("4").doc("Output width."),
      option("truth_seed", T::Integer).value("1234").doc("Seed of the hidden map the model must learn."),
      option("step_delay_ms", T::Integer).value("0").doc("Sleep per micro-batch (tests that interrupt runs)."),
      option("nan_at_call", T::Integer).value("0").doc("Make the loss NaN on this training_step call (tests)."),
      option("nan_rank", T::Integer).value("-1").doc("... in the process of this RANK only (-1: every process)."),
      option("inf_grad_at_call", T::Integer).value("0").doc("Make the weight's gradient inf on this call (tests)."),
      option("kill_rank", T::Integer).value("-1").doc("The RANK whose process SIGKILLs itself (tests)."),
      option("kill_at_call", T::Integer).value("0").doc("On which call it does, in a job's first attempt (tests)."),
      option("bias_lr_scale", T::Number).value("1.0").doc(
          "Not 1: the bias trains as its own parameter group with this learning-rate multiplier and no weight decay."),
      option("frozen_state", T::Boolean).value("false").doc(
          "Add a frozen parameter `offset` and a buffer `steps_seen` (micro-batches trained) to the output (tests)."),
      option("bias_phase_steps", T::Integer).value("0").doc(
          "N > 0: train in two phases, the weight for one step, then the bias for N steps (tests)."),
      option("stray_gradient", T::Boolean).value("false").doc(
          "With phases: let each phase's step give the other phase's parameter a gradient too (tests)."),
  };
  d.make_model = [](const wanfw::Options& o, const wanfw::PluginContext&) -> std::unique_ptr<wanfw::Model> {
    for (const char* name : {"in_features", "out_features"})
      if (o.integer(name) < 1) o.fail(name, "must be at least 1");
    if (o.integer("bias_phase_steps") < 0) o.fail("bias_phase_steps", "must be 0 (no phases) or more");
    return std::make_unique<LinearRegressionModel>(o.integer("in_features"), o.integer("out_features"),
                                                   static_cast<std::uint64_t>(o.integer("truth_seed")),
                                                   o.integer("step_delay_ms"),
                                                   Faults{o.integer("nan_at_call"), o.integer("nan_rank"),
                                                          o.integer("inf_grad_at_call"), o.integer("kill_rank"),
                                                          o.integer("kill_at_call")},
                                                   o.number("bias_lr_scale"), o.boolean("frozen_state"),
                                                   o.integer("bias_phase_steps"), o.boolean("stray_gradient"));
  };
  return d;
}

}  // namespace

WANFW_PLUGIN(Model, describe)
