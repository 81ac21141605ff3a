// Strategy `single`: the whole model on one device (the CPU or one CUDA device).

#include <fmt/format.h>
#include <torch/cuda.h>

#include "wanfw/error.hpp"
#include "wanfw/plugin.hpp"

namespace {

int cuda_devices() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

class SingleDeviceStrategy final : public wanfw::Strategy {
 public:
  SingleDeviceStrategy(c10::Device device, wanfw::SourceLocation where) : device_(device), where_(std::move(where)) {}

  std::string describe() const override { return fmt::format("single device {}", device_.str()); }

  /// The device must exist where the run happens (a config may be validated on a machine
  /// without GPUs): a missing CUDA device is an error here, never a fall-back to the CPU.
  void setup(wanfw::Model& model) override {
    const int available = cuda_devices();
    if (device_.is_cuda() && device_.index() >= available)
      throw wanfw::ConfigError(
          where_,
          available == 0
              ? fmt::format("strategy.device: '{}' was asked for, but this machine has no usable CUDA device",
                            device_.str())
              : fmt::format("strategy.device: '{}' was asked for, but only {} CUDA device(s) exist", device_.str(),
                            available),
          "use device: auto or cpu, or run where the GPU is");
    model.module()->to(device_);
  }
  c10::Device device() const override { return device_; }

 private:
  c10::Device device_;
  wanfw::SourceLocation where_;
};

/// Parses `auto`, `cpu`, `cuda`, `cuda:N` (availability is checked in setup).
c10::Device resolve_device(const wanfw::Options& options) {
  const std::string text = options.string("device");
  if (text == "auto") return cuda_devices() > 0 ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (text == "cuda" || text.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (text.size() > 5) {
      try {
        std::size_t used = 0;
        index = std::stoi(text.substr(5), &used);
        if (used != text.size() - 5 || index < 0) throw std::invalid_argument(text);
      } catch (const std::exception&) {
        options.fail("device", fmt::format("'{}' is not a device", text), "use auto, cpu, cuda or cuda:N");
      }
    }
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  options.fail("device", fmt::format("'{}' is not a device", text), "use auto, cpu, cuda or cuda:N");
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_strategy("single", "1.0.0", "Train on one device: the CPU or one CUDA GPU.");
  d.options = {wanfw::option("device", wanfw::OptionType::String)
                   .value("auto")
                   .doc("auto (the first CUDA device if there is one, else the CPU), cpu, cuda or cuda:N.")};
  d.capabilities.unit_gradients_final = true;  // nothing reduces them
  d.make_strategy = [](const wanfw::Options& options, const wanfw::PluginContext&) -> std::unique_ptr<wanfw::Strategy> {
    return std::make_unique<SingleDeviceStrategy>(resolve_device(options), options.where("device"));
  };
  return d;
}

}  // namespace

WANFW_PLUGIN(Strategy, describe)
