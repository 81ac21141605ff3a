// Benchmark: the memory one checkpointed block's backward takes, recomputed whole and in chunks of
// tokens (model.recompute_chunks), at a real block's width: by default a Wan2.2 A14B block (dim
// 5120, ffn_dim 13824, 40 heads) with rank-32 adapters on its ten Linear layers over a frozen base,
// a 512-token context, one sample of --tokens tokens.
//
//   build/bin/wanfw_bench_chunked_recompute [--tokens 4096] [--chunks 1,2,4,8] [--preset NAME] [--rank 32]
//                                           [--device cpu|cuda] [--dtype float32|bfloat16] [--fp8]
//
// On the CPU every tensor allocation goes through a counting allocator; on a GPU the caching
// allocator's statistics count them. Either way the figures are tensor bytes (what
// max_memory_allocated counts), not the process's resident size. --dtype is the block's and the
// activations' (bfloat16 as the A14B examples compute), --fp8 stores the base's Linear weights in
// e4m3 (model.base_dtype). For each chunk count: the forward's and the backward's peak above what is
// held before each (weights, adapters, the block's input, its output and the output's gradient), in
// GiB and in values a token; the plan's count for the recomputed block (wan::recomputed_block_bytes,
// what model-info adds up); the seconds of the forward and of the backward; and whether the output
// and the input's gradient equal the whole block's bit for bit (else their largest difference
// relative to their largest value; the adapters' gradients, sums over the tokens, are compared so
// always).
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/autocast_mode.h>

#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/memory_estimate.hpp"
#include "wan/wan_config.hpp"
#include "wan/wan_dit.hpp"

namespace {

/// The default CPU allocator, counting the bytes its live allocations hold and their peak.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(std::size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    auto* held = new Held{std::move(inner), n};
    const std::size_t now = live_ += n;
    std::size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return {data, held, &release, c10::Device(c10::kCPU)};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  static std::size_t live() { return live_; }
  static std::size_t peak() { return peak_; }
  static void reset_peak() { peak_ = live_.load(); }

 private:
  struct Held {
    c10::DataPtr inner;
    std::size_t bytes;
  };
  static void release(void* context) {
    auto* held = static_cast<Held*>(context);
    live_ -= held->bytes;
    delete held;
  }
  c10::Allocator* inner_;
  static inline std::atomic<std::size_t> live_{0}, peak_{0};
};

/// Tensor bytes held on `device` now and at the peak since the last reset: the counting allocator's on
/// the CPU, the caching allocator's on a GPU.
struct DeviceMemory {
  torch::Device device;
  std::size_t live() const {
    if (!device.is_cuda()) return CountingAllocator::live();
    return static_cast<std::size_t>(stats().allocated_bytes[kAll].current);
  }
  std::size_t peak() const {
    if (!device.is_cuda()) return CountingAllocator::peak();
    return static_cast<std::size_t>(stats().allocated_bytes[kAll].peak);
  }
  void reset_peak() const {
    synchronize();
    if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    else CountingAllocator::reset_peak();
  }
  void synchronize() const {
    if (device.is_cuda()) torch::cuda::synchronize();
  }

 private:
  static constexpr auto kAll = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  c10::CachingDeviceAllocator::DeviceStats stats() const {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  }
};

double gib(double bytes) { return bytes / wan::kGiB; }

bool flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i)
    if (argv[i] == name) return true;
  return false;
}

/// "bitwise", or the largest difference relative to the largest value.
std::string compared(const torch::Tensor& a, const torch::Tensor& b) {
  if (torch::equal(a, b)) return "bitwise";
  const torch::Tensor x = a.to(torch::kFloat32), y = b.to(torch::kFloat32);
  return fmt::format("within {:.1e}", ((x - y).abs().max() / y.abs().max()).item<double>());
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string argument(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return fallback;
}

struct Result {
  torch::Tensor output, grad_x;
  std::vector<torch::Tensor> adapter_grads;
};

}  // namespace

int main(int argc, char** argv) {
  static CountingAllocator counting(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/100);
  const wan::WanConfig c = wan::wan_preset(argument(argc, argv, "--preset", "wan2.2-t2v-a14b"));
  const std::int64_t tokens = std::stoll(argument(argc, argv, "--tokens", "4096"));
  const std::int64_t rank = std::stoll(argument(argc, argv, "--rank", "32"));
  std::vector<std::int64_t> chunk_counts;
  for (const auto& part : c10::split(argument(argc, argv, "--chunks", "1,2,4,8"), ','))
    chunk_counts.push_back(std::stoll(std::string(part)));

  const torch::Device device(argument(argc, argv, "--device", "cpu"));
  const std::string dtype_name = argument(argc, argv, "--dtype", "float32");
  const torch::Dtype dtype = dtype_name == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  const bool fp8 = flag(argc, argv, "--fp8");
  const DeviceMemory memory{device.is_cuda() && !device.has_index() ? torch::Device(torch::kCUDA, 0) : device};
  fmt::print("one block of {}: dim {}, ffn_dim {}, {} heads; {} tokens, context {} tokens, {}{} on {}; adapters of "
             "rank {} (float32) on every Linear over a frozen base; {} threads\n",
             c.preset, c.dim, c.ffn_dim, c.num_heads, tokens, c.text_len, dtype_name, fp8 ? ", base in fp8" : "",
             device.str(), rank, at::get_num_threads());
  torch::manual_seed(0);
  wan::WanBlock block(c);
  for (auto& p : block->parameters()) p.requires_grad_(false);
  std::vector<wan::WanLinearImpl*> linears;
  for (const auto& module : block->modules())
    if (auto* linear = module->as<wan::WanLinearImpl>()) linears.push_back(linear);
  if (fp8)
    for (auto* linear : linears) linear->quantize_base();
  block->to(device, dtype);
  for (auto* linear : linears) linear->attach_lora({rank, static_cast<double>(rank), 0.0}, torch::kFloat32);
  {
    torch::NoGradGuard no_grad;  // adapters that change the output, so every path carries a gradient
    for (auto& p : block->parameters())
      if (p.requires_grad()) p.normal_(0.0, 0.02);
  }
  const auto on = [&](const torch::Tensor& t) { return t.to(device, dtype); };
  const torch::Tensor x = on(torch::randn({1, tokens, c.dim})).requires_grad_(true);
  const torch::Tensor e0 = torch::randn({1, 6, c.dim}).to(device) * 0.1;  // the time projection stays float32
  const torch::Tensor context = on(torch::randn({1, c.text_len, c.dim}));
  const torch::Tensor angles = torch::rand({tokens, c.head_dim() / 2}) * 6.3;
  const wan::RopeTables rope{torch::polar(torch::ones_like(angles), angles).to(device)};
  const torch::Tensor grad_output = on(torch::randn({1, tokens, c.dim}));
  const double value = dtype == torch::kBFloat16 ? 2 : 4, per_token = static_cast<double>(tokens) * value;
  // Under bf16 the products compute in bf16 as a bf16 run's autocast has them.
    if (dtype == torch::kBFloat16) {
    at::autocast::set_autocast_dtype(device.type(), torch::kBFloat16);
    at::autocast::set_autocast_enabled(device.type(), true);
  }

  fmt::print("{:>6} | {:>10} | {:>10} | {:>13} | {:>13} | {:>7} | {:>7} | {:>9} | {}\n", "chunks", "forward", "backward",
             "values/token", "plan", "fwd s", "bwd s", "x memory", "same as whole");
  Result whole;
  double whole_backward = 0;
  for (const std::int64_t chunks : chunk_counts) {
    x.mutable_grad() = torch::Tensor();
    block->zero_grad();
    memory.reset_peak();
    const std::size_t before_forward = memory.live();
    auto start = std::chrono::steady_clock::now();
    const torch::Tensor out = wan::checkpointed_block(*block, {x, e0, context, rope}, {.chunks = chunks});
    memory.synchronize();
    const double forward_s = seconds_since(start);
    const double forward_peak = static_cast<double>(memory.peak() - before_forward);
    memory.reset_peak();
    const std::size_t before_backward = memory.live();
    start = std::chrono::steady_clock::now();
    out.backward(grad_output);
    memory.synchronize();
    const double backward_s = seconds_since(start);
    const double backward_peak = static_cast<double>(memory.peak() - before_backward);
    Result r{out.detach(), x.grad().clone(), {}};
    for (const auto& p : block->parameters())
      if (p.requires_grad()) r.adapter_grads.push_back(p.grad().clone());
    std::string same = "(the reference)";
    if (whole.output.defined()) {
      double adapters = 0;
      for (std::size_t i = 0; i < r.adapter_grads.size(); ++i)
        adapters = std::max(adapters, ((r.adapter_grads[i] - whole.adapter_grads[i]).abs().max() /
                                       whole.adapter_grads[i].abs().max()).item<double>());
      same = fmt::format("output {}, input gradient {}, adapters' gradients within {:.1e}",
                         compared(r.output, whole.output), compared(r.grad_x, whole.grad_x), adapters);
    } else {
      whole = r;
      whole_backward = backward_peak;
    }
    const double plan = wan::recomputed_block_bytes(c, static_cast<double>(tokens), value, chunks, false);
    fmt::print("{:>6} | {:>6.2f} GiB | {:>6.2f} GiB | {:>6.0f} ({:>4.1f}) | {:>6.0f} ({:>4.1f}) | {:>7.1f} | {:>7.1f} | {:>8.2f}x | {}\n",
               chunks, gib(forward_peak), gib(backward_peak), backward_peak / per_token,
               backward_peak / per_token / static_cast<double>(c.dim), plan / per_token,
               plan / per_token / static_cast<double>(c.dim), forward_s, backward_s, backward_peak / whole_backward, same);
  }
  fmt::print("(values/token: the peak over tokens x {} bytes, in brackets in units of dim; plan: the memory plan's "
             "count for the recomputed block)\n", value);
  return 0;
}
