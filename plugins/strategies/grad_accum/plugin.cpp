// Strategy `grad_accum`: N micro-batches per optimizer step around any other strategy (`inner`).
// Gradients of the N micro-batches add up locally (each loss scaled by 1/N), and the inner
// strategy synchronises only after the last one, so the update equals one batch of N x B.

#include <fmt/format.h>

#include "wanfw/plugin.hpp"

namespace {

using wanfw::option;
using T = wanfw::OptionType;

class GradAccumStrategy final : public wanfw::Strategy {
 public:
  GradAccumStrategy(int steps, std::shared_ptr<wanfw::Strategy> inner) : steps_(steps), inner_(std::move(inner)) {}

  std::string describe() const override {
    return fmt::format("grad_accum: {} micro-batches per step, around {}", steps_, inner_->describe());
  }
  void setup(wanfw::Model& model) override { inner_->setup(model); }
  c10::Device device() const override { return inner_->device(); }
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  int data_rank() const override { return inner_->data_rank(); }
  int data_world_size() const override { return inner_->data_world_size(); }
  int accumulation_steps() const override { return steps_ * inner_->accumulation_steps(); }
  wanfw::StepOutput micro_step(wanfw::Model& model, const wanfw::Batch& batch,
                               const wanfw::MicroStep& micro) override {
    return inner_->micro_step(model, batch, micro);  // micro.sync_gradients is set on the last one only
  }
  void before_optimizer_step(wanfw::Model& model) override { inner_->before_optimizer_step(model); }
  void after_optimizer_step(wanfw::Model& model, const wanfw::OptimizerStep& step) override {
    inner_->after_optimizer_step(model, step);
  }
  std::vector<double> all_reduce(std::vector<double> values, wanfw::Reduce op) override {
    return inner_->all_reduce(std::move(values), op);
  }
  std::vector<double> broadcast(std::vector<double> values) override { return inner_->broadcast(std::move(values)); }
  void barrier() override { inner_->barrier(); }
  std::vector<wanfw::ParameterGroup> parameter_groups(wanfw::Model& model) override {
    return inner_->parameter_groups(model);
  }
  double clip_gradients(const std::vector<at::Tensor>& parameters, double max_norm) override {
    return inner_->clip_gradients(parameters, max_norm);
  }
  void begin_evaluation(wanfw::Model& model) override { inner_->begin_evaluation(model); }
  void end_evaluation(wanfw::Model& model) override { inner_->end_evaluation(model); }
  const wanfw::NetworkGroups* network_groups() const override { return inner_->network_groups(); }
  std::shared_ptr<wanfw::UnitFetcher> unit_fetcher() override { return inner_->unit_fetcher(); }
  wanfw::StatePieces state_pieces(wanfw::Model& model, torch::optim::AdamW& optimizer) override {
    return inner_->state_pieces(model, optimizer);
  }
  void load_optimizer_state(wanfw::Model& model, torch::optim::AdamW& optimizer,
                            const wanfw::TensorRowSource& source) override {
    inner_->load_optimizer_state(model, optimizer, source);
  }

 private:
  int steps_;
  std::shared_ptr<wanfw::Strategy> inner_;
};

std::unique_ptr<wanfw::Strategy> make_strategy(const wanfw::Options& o, const wanfw::PluginContext& ctx) {
  const std::int64_t steps = o.integer("steps");
  if (steps < 1) o.fail("steps", "must be at least 1");
  return std::make_unique<GradAccumStrategy>(static_cast<int>(steps), ctx.build_strategy("inner"));
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_strategy(
      "grad_accum", "0.1.0",
      "Gradient accumulation around any strategy (`inner`): N micro-batches per optimizer step, gradients "
      "synchronised once, after the last.");
  d.options = {option("steps", T::Integer).value("2").doc("Micro-batches per optimizer step.")};
  d.subsections = {"inner"};
  d.capabilities.unit_gradients_final = true;  // it reduces nothing itself: the inner strategy decides
  d.strategy_layout = [](const wanfw::Options& o) {
    wanfw::StrategyLayout layout;
    layout.accumulation = static_cast<int>(o.integer("steps"));
    return layout;
  };
  d.make_strategy = make_strategy;
  return d;
}

}  // namespace

WANFW_PLUGIN(Strategy, describe)
