// Strategy `local_sgd`: every rank trains on its own shard and steps its own optimizer; every K
// steps the ranks average their parameters (and, if asked, AdamW's moments). Gradients never
// travel: one all-reduce of the weights every K steps instead of one of the gradients every step,
// for slow interconnects. With K = 1 and plain SGD this is data-parallel training; with AdamW and
// K > 1 the replicas drift between averages, which is the point and the price.
//
// Built out of tree against the installed SDK (examples/plugins/CMakeLists.txt).

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include <wanfw/parallel/distributed.hpp>
#include <wanfw/log.hpp>
#include <wanfw/plugin.hpp>
#include <wanfw/io/safetensors.hpp>

namespace {

using wanfw::option;
using T = wanfw::OptionType;
using Reduce = wanfw::DistributedSession::Reduce;

struct LocalSgdSettings {
  std::int64_t every = 4;
  bool average_optimizer_state = false;
  std::filesystem::path trace_dir;  ///< empty: no traces
};

class LocalSgdStrategy final : public wanfw::Strategy {
 public:
  LocalSgdStrategy(LocalSgdSettings settings, std::unique_ptr<wanfw::DistributedSession> session)
      : settings_(std::move(settings)), session_(std::move(session)) {}

  std::string describe() const override {
    return wanfw::str("local_sgd: parameters averaged every ", settings_.every, " steps",
                      settings_.average_optimizer_state ? " with the optimizer's moments" : "", "; ",
                      session_->describe());
  }
  c10::Device device() const override { return session_->device(); }
  int rank() const override { return session_->rank(); }
  int world_size() const override { return session_->world_size(); }

  void setup(wanfw::Model& model) override {
    model.module()->to(device());
    for (auto& [name, tensor] : model.trainable_parameters()) {
      names_.push_back(name);
      parameters_.push_back(tensor);
    }
    for (const auto& buffer : model.module()->buffers()) buffers_.push_back(buffer);
    // Every rank starts from rank 0's weights.
    std::vector<at::Tensor> state = parameters_;
    state.insert(state.end(), buffers_.begin(), buffers_.end());
    session_->broadcast(state, 0);
    if (is_main())
      wanfw::log::info("local_sgd: ", parameters_.size(), " parameters averaged over ", world_size(),
                       " processes every ", settings_.every, " steps");
  }

  // micro_step: the default (forward, backward). No gradient is reduced.

  void after_optimizer_step(wanfw::Model&, const wanfw::OptimizerStep& step) override {
    // Average on schedule, and before every checkpoint so that it holds the ranks' consensus.
    if (step.step % settings_.every != 0 && !step.checkpoint_follows) return;
    if (!settings_.trace_dir.empty()) trace(step.step, "before");
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> averaged = parameters_;
    for (const auto& buffer : buffers_)
      if (buffer.is_floating_point()) averaged.push_back(buffer);
    if (settings_.average_optimizer_state && step.optimizer != nullptr)
      for (const auto& parameter : parameters_) {
        auto it = step.optimizer->state().find(parameter.unsafeGetTensorImpl());
        if (it == step.optimizer->state().end()) continue;
        auto& moments = static_cast<torch::optim::AdamWParamState&>(*it->second);
        averaged.push_back(moments.exp_avg());
        averaged.push_back(moments.exp_avg_sq());
      }
    session_->all_reduce(averaged, Reduce::Mean);
    if (!settings_.trace_dir.empty()) trace(step.step, "after");
  }

  // The core's decisions (stop, NaN guard, checkpoints) and metric averages rest on these.
  std::vector<double> all_reduce(std::vector<double> values, wanfw::Reduce op) override {
    return session_->all_reduce(std::move(values), op);
  }
  std::vector<double> broadcast(std::vector<double> values) override { return session_->broadcast(std::move(values)); }
  void barrier() override { session_->barrier(); }

 private:
  /// This rank's parameters, as safetensors: <trace_dir>/rank<R>-step<N>-<when>.safetensors.
  void trace(std::int64_t step, const char* when) const {
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      tensors.emplace_back(names_[i], parameters_[i].detach().cpu().contiguous());
    std::filesystem::create_directories(settings_.trace_dir);
    wanfw::write_safetensors(settings_.trace_dir / wanfw::str("rank", rank(), "-step", step, "-", when, ".safetensors"),
                             tensors);
  }

  LocalSgdSettings settings_;
  std::unique_ptr<wanfw::DistributedSession> session_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> parameters_, buffers_;
};

std::unique_ptr<wanfw::Strategy> make_strategy(const wanfw::Options& o, const wanfw::PluginContext& ctx) {
  LocalSgdSettings s;
  s.every = o.integer("every");
  if (s.every < 1) o.fail("every", "must be at least 1");
  s.average_optimizer_state = o.boolean("average_optimizer_state");
  s.trace_dir = o.string("trace_dir");
  const double timeout = o.number("timeout_s");
  if (!(timeout > 0)) o.fail("timeout_s", "must be positive");
  wanfw::ProcessGroupOptions group;
  group.backend = o.string("backend");
  group.device = o.string("device");
  group.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
  group.section = ctx.section;
  group.config = &o;
  return std::make_unique<LocalSgdStrategy>(s, wanfw::DistributedSession::join(group));
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_strategy(
      "local_sgd", "0.1.0",
      "Local SGD: every rank steps on its own; parameters (optionally AdamW moments) averaged every K steps.");
  d.options = {
      option("every", T::Integer).value("4").doc("Average the parameters every this many optimizer steps (K)."),
      option("average_optimizer_state", T::Boolean).value("false").doc(
          "Also average AdamW's first and second moments."),
      option("backend", T::Choice).value("auto").choices({"auto", "gloo", "nccl"}).doc(
          "Collective backend: nccl on CUDA devices and gloo on CPUs (auto), or forced."),
      option("device", T::Choice).value("auto").choices({"auto", "cpu", "cuda"}).doc(
          "cuda:<LOCAL_RANK> when CUDA is available (auto), or forced."),
      option("timeout_s", T::Number).value("1800").doc("Seconds a collective may wait for the other ranks."),
      option("trace_dir", T::String).value("\"\"").doc(
          "If set, each rank writes its parameters before and after every averaging to "
          "<trace_dir>/rank<R>-step<N>-{before,after}.safetensors (for checking the averaging)."),
  };
  d.make_strategy = make_strategy;
  return d;
}

}  // namespace

WANFW_PLUGIN(Strategy, describe)
