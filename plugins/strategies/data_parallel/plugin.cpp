// Strategy `data_parallel`: one process, several local devices. The model is replicated onto
// every device (every parameter and buffer copied from the model), each micro-batch is split
// across the replicas, which run forward and backward side by side (one thread each), and their
// gradients are summed onto the first device, where the optimizer steps. Before each step the
// trained parameters and the buffers are copied to the replicas again. With fewer than two
// devices it runs as `single`.

#include <exception>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"
#include "wanfw/log.hpp"
#include "wanfw/plugin.hpp"

namespace {

using wanfw::option;
using T = wanfw::OptionType;

class DataParallelStrategy final : public wanfw::Strategy {
 public:
  explicit DataParallelStrategy(std::vector<c10::Device> devices) : devices_(std::move(devices)) {}

  std::string describe() const override {
    std::vector<std::string> names;
    for (const auto& d : devices_) names.push_back(d.str());
    return devices_.size() > 1 ? fmt::format("data_parallel over {} devices ({})", devices_.size(), fmt::join(names, ", "))
                               : fmt::format("data_parallel with one device ({}): runs as single", names.front());
  }
  c10::Device device() const override { return devices_.front(); }

  void setup(wanfw::Model& model) override {
    model.module()->to(devices_.front());
    if (devices_.size() < 2) return;
    trainable_.push_back(trainable_of(model));
    buffers_.push_back(buffers_of(model));
    for (std::size_t i = 1; i < devices_.size(); ++i) {
      std::unique_ptr<wanfw::Model> replica = model.replicate(devices_[i]);  // the host checked it can
      trainable_.push_back(trainable_of(*replica));
      buffers_.push_back(buffers_of(*replica));
      if (trainable_.back().size() != trainable_.front().size() || buffers_.back().size() != buffers_.front().size())
        throw wanfw::PluginError("data_parallel: a replica has other parameters or buffers than the model",
                                 "Model::replicate must build the same modules");
      copy_state(model, *replica);
      replicas_.push_back(std::move(replica));
    }
  }

  wanfw::StepOutput micro_step(wanfw::Model& model, const wanfw::Batch& batch,
                               const wanfw::MicroStep& micro) override {
    if (replicas_.empty()) return Strategy::micro_step(model, batch, micro);
    if (micro.index == 0) refresh_replicas();

    // Split the batch as evenly as it goes; a batch smaller than the device count leaves some idle.
    // Each slice keeps its samples' ids, so their random draws are those of any other layout.
    const std::int64_t n = static_cast<std::int64_t>(devices_.size());
    std::vector<wanfw::Batch> slices;
    for (std::int64_t i = 0, start = 0; i < n; ++i) {
      const std::int64_t size = batch.size / n + (i < batch.size % n ? 1 : 0);
      if (size == 0) break;
      slices.push_back(batch.slice(start, size));
      start += size;
    }

    std::vector<wanfw::StepOutput> outputs(slices.size());
    std::vector<std::exception_ptr> errors(slices.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < slices.size(); ++i)
      threads.emplace_back([&, i] {
        try {
          wanfw::Model& replica = i == 0 ? model : *replicas_[i - 1];
          outputs[i] = forward(replica, slices[i], micro, devices_[i]);
          backward(outputs[i], micro, share(slices[i], batch));
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);

    reduce_gradients_onto_first_device(slices.size());
    // Loss and metrics as the whole batch would report them: the size-weighted mean.
    wanfw::StepOutput total;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      auto add = [&](at::Tensor& into, const at::Tensor& value) {
        const at::Tensor v = value.detach().to(devices_.front()).to(at::kDouble) * share(slices[i], batch);
        into = into.defined() ? into + v : v;
      };
      add(total.loss, outputs[i].loss);
      for (const auto& [name, value] : outputs[i].metrics) add(total.metrics[name], value);
      for (const auto& [name, mean] : outputs[i].sample_means) {  // sums: the replicas' samples together
        auto& into = total.sample_means[name];
        const auto summed = [&](at::Tensor& to, const at::Tensor& v) {
          const at::Tensor d = v.detach().to(devices_.front()).to(at::kDouble);
          to = to.defined() ? to + d : d;
        };
        summed(into.sum, mean.sum);
        summed(into.count, mean.count);
      }
    }
    return total;
  }

 private:
  static double share(const wanfw::Batch& slice, const wanfw::Batch& batch) {
    return static_cast<double>(slice.size) / static_cast<double>(batch.size);
  }

  static std::vector<at::Tensor> trainable_of(wanfw::Model& model) {
    std::vector<at::Tensor> out;
    for (auto& [name, tensor] : model.trainable_parameters()) out.push_back(tensor);
    return out;
  }

  static std::vector<at::Tensor> buffers_of(wanfw::Model& model) { return model.module()->buffers(); }

  /// Every parameter and buffer of `model` into `replica`, matched by name: the replica starts as
  /// an exact copy whatever its plugin built (frozen parameters included, e.g. a teacher).
  static void copy_state(wanfw::Model& model, wanfw::Model& replica) {
    torch::NoGradGuard no_grad;
    auto copy = [](const torch::OrderedDict<std::string, at::Tensor>& from,
                   const torch::OrderedDict<std::string, at::Tensor>& into, const char* what) {
      if (from.size() != into.size())
        throw wanfw::PluginError(fmt::format("data_parallel: the replica has {} {}, the model {}", into.size(), what,
                                             from.size()),
                                 "Model::replicate must build the same modules");
      for (const auto& item : from) {
        const at::Tensor* target = into.find(item.key());
        if (target == nullptr)
          throw wanfw::PluginError(fmt::format("data_parallel: the replica has no {} '{}'", what, item.key()),
                                   "Model::replicate must build the same modules");
        at::Tensor(*target).copy_(item.value());
      }
    };
    copy(model.module()->named_parameters(), replica.module()->named_parameters(), "parameters");
    copy(model.module()->named_buffers(), replica.module()->named_buffers(), "buffers");
  }

  /// Before each step: the trained parameters and every buffer from the model to the replicas
  /// (frozen parameters do not change, and were copied in setup).
  void refresh_replicas() {
    torch::NoGradGuard no_grad;
    for (std::size_t r = 1; r < trainable_.size(); ++r) {
      for (std::size_t i = 0; i < trainable_[0].size(); ++i) trainable_[r][i].copy_(trainable_[0][i]);
      for (std::size_t i = 0; i < buffers_[0].size(); ++i) buffers_[r][i].copy_(buffers_[0][i]);
    }
  }

  void reduce_gradients_onto_first_device(std::size_t used) {
    torch::NoGradGuard no_grad;
    for (std::size_t r = 1; r < used; ++r)
      for (std::size_t i = 0; i < trainable_[0].size(); ++i) {
        at::Tensor& replica_grad = trainable_[r][i].mutable_grad();
        if (!replica_grad.defined()) continue;
        at::Tensor& grad = trainable_[0][i].mutable_grad();
        const at::Tensor moved = replica_grad.to(grad.defined() ? grad.device() : trainable_[0][i].device());
        grad = grad.defined() ? grad.add_(moved) : moved.clone();
        replica_grad = at::Tensor();
      }
  }

  std::vector<c10::Device> devices_;
  std::vector<std::unique_ptr<wanfw::Model>> replicas_;
  std::vector<std::vector<at::Tensor>> trainable_;  ///< [0]: the model's trained parameters; [r]: replica r's
  std::vector<std::vector<at::Tensor>> buffers_;    ///< [0]: the model's buffers; [r]: replica r's
};

/// The devices `devices` names (refused through Options::fail when one is not a visible device),
/// or every visible CUDA device, or the CPU.
std::vector<c10::Device> devices_of(const wanfw::Options& o) {
  std::vector<c10::Device> devices;
  for (const auto& name : o.strings("devices")) {
    try {
      devices.emplace_back(name);
    } catch (const std::exception&) {
      o.fail("devices", fmt::format("'{}' is not a device", name), "write cuda:0, cuda:1, ... (or cpu)");
    }
    if (devices.back().is_cuda() &&
        (!torch::cuda::is_available() || devices.back().index() >= static_cast<int>(torch::cuda::device_count())))
      o.fail("devices", fmt::format("{} is not a visible CUDA device ({} visible)", name,
                                    torch::cuda::is_available() ? torch::cuda::device_count() : 0));
  }
  if (devices.empty()) {
    const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
    for (int i = 0; i < count; ++i) devices.emplace_back(c10::kCUDA, static_cast<c10::DeviceIndex>(i));
    if (devices.empty()) devices.emplace_back(c10::kCPU);
  }
  return devices;
}

std::unique_ptr<wanfw::Strategy> make_strategy(const wanfw::Options& o, const wanfw::PluginContext&) {
  const std::vector<c10::Device> devices = devices_of(o);
  if (devices.size() < 2)
    wanfw::log::info(
        fmt::format("data_parallel: {} device ({}); running as single", devices.size(), devices.front().str()));
  else if (devices.front().is_cpu())
    wanfw::log::info(fmt::format(
        "data_parallel: {} replicas on the CPU share its cores; this checks the mechanism, it is not faster",
        devices.size()));
  return std::make_unique<DataParallelStrategy>(devices);
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_strategy(
      "data_parallel", "0.1.0",
      "One process, several local devices: replicas run each micro-batch's slices side by side and their gradients "
      "are summed on the first device. Runs as single with fewer than two devices.");
  d.options = {option("devices", T::StringList)
                   .value("[]")
                   .doc("Devices to replicate onto (cuda:0, cuda:1, ...); empty takes every visible CUDA device.")};
  d.capabilities.replicates_module = true;
  d.strategy_layout = [](const wanfw::Options& o) {
    wanfw::StrategyLayout layout;
    layout.replicas = static_cast<int>(devices_of(o).size());
    return layout;
  };
  d.make_strategy = make_strategy;
  return d;
}

}  // namespace

WANFW_PLUGIN(Strategy, describe)
