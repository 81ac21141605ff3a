// Strategy `data_parallel`: one process, several local devices. The model is replicated onto
// every device, each micro-batch is split across the replicas, which run forward and backward
// side by side (one thread each), and their gradients are summed onto the first device, where
// the optimizer steps. With fewer than two devices it runs as `single`.

#include <exception>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"
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
    parameters_.push_back(parameters_of(model));
    for (std::size_t i = 1; i < devices_.size(); ++i) {
      std::unique_ptr<wanfw::Model> replica = model.replicate(devices_[i]);
      if (!replica)
        throw wanfw::PluginError("data_parallel: this model plugin cannot replicate its model (Model::replicate)",
                                 "use the ddp strategy (one process per device), which needs no replicas");
      parameters_.push_back(parameters_of(*replica));
      if (parameters_.back().size() != parameters_.front().size())
        throw wanfw::PluginError("data_parallel: a replica has other trainable parameters than the model");
      replicas_.push_back(std::move(replica));
    }
  }

  wanfw::StepOutput micro_step(wanfw::Model& model, const wanfw::Batch& batch,
                               const wanfw::MicroStep& micro) override {
    if (replicas_.empty()) return Strategy::micro_step(model, batch, micro);
    if (micro.index == 0) copy_weights_to_replicas();

    // Split the batch as evenly as it goes; a batch smaller than the device count leaves some idle.
    const std::int64_t n = static_cast<std::int64_t>(devices_.size());
    std::vector<wanfw::Batch> chunks;
    for (std::int64_t i = 0, start = 0; i < n; ++i) {
      const std::int64_t size = batch.size / n + (i < batch.size % n ? 1 : 0);
      if (size == 0) break;
      wanfw::Batch chunk;
      chunk.size = size;
      for (const auto& [name, tensor] : batch.fields) chunk.fields[name] = tensor.narrow(0, start, size);
      chunks.push_back(std::move(chunk));
      start += size;
    }

    std::vector<wanfw::StepOutput> outputs(chunks.size());
    std::vector<std::exception_ptr> errors(chunks.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < chunks.size(); ++i)
      threads.emplace_back([&, i] {
        try {
          wanfw::Model& replica = i == 0 ? model : *replicas_[i - 1];
          const c10::Device device = devices_[i];
          const wanfw::Batch on_device = chunks[i].to(device, device.is_cuda());
          wanfw::StepOutput out;
          {
            std::optional<wanfw::Precision::AutocastScope> autocast;  // thread-local state: per thread
            if (micro.precision != nullptr) autocast.emplace(*micro.precision, device);
            out = replica.training_step(on_device);
          }
          // Each replica's share of the batch mean, and of the accumulation.
          const double share = static_cast<double>(chunks[i].size) / static_cast<double>(batch.size);
          at::Tensor loss = out.loss * (share / micro.count);
          if (micro.precision != nullptr) loss = micro.precision->scale(loss);
          loss.backward();
          outputs[i] = std::move(out);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);

    reduce_gradients_onto_first_device(chunks.size());
    // Loss and metrics as the whole batch would report them: the size-weighted mean.
    wanfw::StepOutput total;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const double share = static_cast<double>(chunks[i].size) / static_cast<double>(batch.size);
      auto add = [&](at::Tensor& into, const at::Tensor& value) {
        const at::Tensor v = value.detach().to(devices_.front()).to(at::kDouble) * share;
        into = into.defined() ? into + v : v;
      };
      add(total.loss, outputs[i].loss);
      for (const auto& [name, value] : outputs[i].metrics) add(total.metrics[name], value);
    }
    return total;
  }

 private:
  static std::vector<at::Tensor> parameters_of(wanfw::Model& model) {
    std::vector<at::Tensor> out;
    for (auto& [name, tensor] : model.trainable_parameters()) out.push_back(tensor);
    return out;
  }

  void copy_weights_to_replicas() {
    torch::NoGradGuard no_grad;
    for (std::size_t r = 1; r < parameters_.size(); ++r)
      for (std::size_t i = 0; i < parameters_[0].size(); ++i) parameters_[r][i].copy_(parameters_[0][i]);
  }

  void reduce_gradients_onto_first_device(std::size_t used) {
    torch::NoGradGuard no_grad;
    for (std::size_t r = 1; r < used; ++r)
      for (std::size_t i = 0; i < parameters_[0].size(); ++i) {
        at::Tensor& replica_grad = parameters_[r][i].mutable_grad();
        if (!replica_grad.defined()) continue;
        at::Tensor& grad = parameters_[0][i].mutable_grad();
        const at::Tensor moved = replica_grad.to(grad.defined() ? grad.device() : parameters_[0][i].device());
        grad = grad.defined() ? grad.add_(moved) : moved.clone();
        replica_grad = at::Tensor();
      }
  }

  std::vector<c10::Device> devices_;
  std::vector<std::unique_ptr<wanfw::Model>> replicas_;
  std::vector<std::vector<at::Tensor>> parameters_;  ///< [0]: the model's; [r]: replica r's
};

std::unique_ptr<wanfw::Strategy> make_strategy(const wanfw::Options& o, const wanfw::PluginContext&) {
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
  if (devices.size() < 2)
    spdlog::info("data_parallel: {} device ({}); running as single", devices.size(), devices.front().str());
  else if (devices.front().is_cpu())
    spdlog::info("data_parallel: {} replicas on the CPU share its cores; this checks the mechanism, it is not faster",
                 devices.size());
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
  d.make_strategy = make_strategy;
  return d;
}

}  // namespace

WANFW_PLUGIN(Strategy, describe)
