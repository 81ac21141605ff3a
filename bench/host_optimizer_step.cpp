// Benchmark: the optimizer step with its state on the device against the same step with the state
// in host memory (optimizer.state host), over the trained parameters of --blocks blocks of a real
// preset's width (each block's ten Linear weights and biases, its norms and modulation).
//
//   build/bin/wanfw_bench_host_optimizer [--preset wan2.2-ti2v-5b] [--blocks 2] [--steps 5]
//                                         [--device cpu|cuda] [--compute float32|bfloat16]
//
// Both sides run ATen's fused AdamW over the same values with clipping; the device side steps the
// parameters where they are (its optimizer state beside them), the host side the fp32 masters the
// run keeps in its host arena: the gradients move there (take_gradients), the host's cores step,
// and the masters go back into the parameters (publish). For each: the median seconds of each part
// over --steps steps after one warm-up step, the parameters a second of the AdamW step itself, and
// the host side's time over the device side's. On the CPU the host is the device: the ratio is the
// cost of the two copies. The copies here run after backward; how much of them hides behind it is a
// later measurement (the gradients move after the micro-batches today, docs/low-memory.md).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "optimizer/training_optimizer.hpp"
#include "train/master_weights.hpp"
#include "wan/wan_config.hpp"

namespace {

using Clock = std::chrono::steady_clock;

/// The trained parameters of `blocks` blocks of `config`, shaped as the DiT's (wan::WanConfig::parameters).
struct Blocks : wanfw::Model {
  Blocks(const wan::WanConfig& config, int blocks, c10::Device device, at::ScalarType dtype) {
    int index = 0;
    for (const wan::ParameterSpec& p : config.parameters()) {
      if (p.place != wan::ParameterPlace::Block || p.block >= blocks) continue;
      holder->register_parameter(fmt::format("p{}", index++), torch::randn(p.shape, at::dtype(dtype).device(device)) * 0.02);
    }
  }
  std::shared_ptr<torch::nn::Module> module() override { return holder; }
  std::vector<wanfw::FieldSpec> batch_fields() const override { return {}; }
  wanfw::StepOutput training_step(const wanfw::Batch&) override { return {}; }
  std::vector<wanfw::ParameterGroup> parameter_groups() override {
    wanfw::ParameterGroup all;
    all.name = "all";
    for (const auto& item : holder->named_parameters()) all.parameters.emplace_back(item.key(), item.value());
    return {all};
  }
  /// Gradients of the parameters' dtype, drawn for `step`.
  void draw_gradients(int step) {
    torch::manual_seed(step);
    for (auto& p : holder->parameters()) p.mutable_grad() = torch::randn_like(p) * 1e-3;
  }
  std::shared_ptr<torch::nn::Module> holder = std::make_shared<torch::nn::Module>();
};

void synchronize(c10::Device device) {
  if (device.is_cuda()) c10::cuda::device_synchronize();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

wanfw::OptimizerSettings adamw() {
  wanfw::OptimizerSettings s;
  s.lr = 1e-5;
  s.implementation = "fused";
  return s;
}

struct Timings {
  double take = 0, step = 0, publish = 0;
  double total() const { return take + step + publish; }
};

/// Times `steps` steps after a warm-up; `home` Device steps the parameters, Host their masters.
Timings measure(const wan::WanConfig& config, int blocks, c10::Device device, at::ScalarType compute,
                wanfw::OptimizerStateHome home, int steps, std::int64_t& count) {
  const bool host = home == wanfw::OptimizerStateHome::Host;
  Blocks model(config, blocks, device, host ? compute : at::kFloat);
  std::unique_ptr<wanfw::MasterWeights> masters;
  if (host) masters = std::make_unique<wanfw::MasterWeights>(model, std::nullopt, home, device);
  wanfw::TrainingOptimizer optimizer((host ? masters->view() : model).parameter_groups(), adamw());
  count = 0;
  for (const at::Tensor& p : optimizer.parameters()) count += p.numel();
  std::vector<double> take, step, publish;
  for (int s = 0; s <= steps; ++s) {
    optimizer.zero_grad();
    model.draw_gradients(s);
    synchronize(device);
    const auto t0 = Clock::now();
    if (host) masters->take_gradients();
    const auto t1 = Clock::now();
    torch::nn::utils::clip_grad_norm_(optimizer.parameters(), 1.0);
    optimizer.step();
    synchronize(device);
    const auto t2 = Clock::now();
    if (host) masters->publish();
    synchronize(device);
    const auto t3 = Clock::now();
    if (s == 0) continue;  // the warm-up: the moments are allocated
    take.push_back(std::chrono::duration<double>(t1 - t0).count());
    step.push_back(std::chrono::duration<double>(t2 - t1).count());
    publish.push_back(std::chrono::duration<double>(t3 - t2).count());
  }
  return {median(take), median(step), median(publish)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "wan2.2-ti2v-5b", device_name = "cpu", compute_name = "float32";
  int blocks = 2, steps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--preset") preset = value;
    else if (key == "--blocks") blocks = std::stoi(value);
    else if (key == "--steps") steps = std::stoi(value);
    else if (key == "--device") device_name = value;
    else if (key == "--compute") compute_name = value;
    else {
      fmt::print(stderr, "unknown option {} (--preset --blocks --steps --device --compute)\n", key);
      return 2;
    }
  }
  torch::NoGradGuard no_grad;
  const wan::WanConfig config = wan::wan_preset(preset);
  const c10::Device device(device_name);
  const at::ScalarType compute = compute_name == "bfloat16" ? at::kBFloat16 : at::kFloat;
  std::int64_t count = 0;
  const Timings on_device =
      measure(config, blocks, device, compute, wanfw::OptimizerStateHome::Device, steps, count);
  const Timings on_host = measure(config, blocks, device, compute, wanfw::OptimizerStateHome::Host, steps, count);
  fmt::print("{} blocks of {} ({:.1f}M trained parameters), device {}, compute {} on the host side; "
             "median of {} steps, clipping included in the step\n",
             blocks, preset, static_cast<double>(count) / 1e6, device_name, compute_name, steps);
  fmt::print("{:<22} {:>10} {:>10} {:>10} {:>10} {:>14}\n", "state", "take s", "step s", "publish s", "total s",
             "AdamW param/s");
  for (const auto& [name, t] : {std::pair{"on the device", on_device}, std::pair{"on the host", on_host}})
    fmt::print("{:<22} {:>10.4f} {:>10.4f} {:>10.4f} {:>10.4f} {:>14.3g}\n", name, t.take, t.step, t.publish,
               t.total(), static_cast<double>(count) / t.step);
  fmt::print("host / device: step {:.2f}x, whole update {:.2f}x\n", on_host.step / on_device.step,
             on_host.total() / on_device.total());
  return 0;
}
