// Benchmark: the memory one checkpointed block's backward takes, recomputed whole and in chunks of
// tokens (model.recompute_chunks), at a real block's width: by default a Wan2.2 A14B block (dim
// 5120, ffn_dim 13824, 40 heads) with rank-32 adapters on its ten Linear layers over a frozen
// float32 base, a 512-token context, one sample of --tokens tokens.
//
//   build/bin/wanfw_bench_chunked_recompute [--tokens 4096] [--chunks 1,2,4,8] [--preset NAME] [--rank 32]
//
// Every tensor the CPU allocates goes through a counting allocator, so the figures are tensor
// bytes (as a GPU's max_memory_allocated counts them), not the process's resident size. For each
// chunk count: the forward's and the backward's peak above what is held before each (weights,
// adapters, the block's input, its output and the output's gradient), in GiB and in values a
// token; the plan's count for the recomputed block (wan::recomputed_block_bytes, what model-info
// adds up); the seconds of the forward and of the backward; and whether the output and the input's
// gradient equal the whole block's bit for bit (the adapters' gradients, sums over the tokens,
// are compared by their largest relative difference).
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <c10/core/CPUAllocator.h>
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

double gib(double bytes) { return bytes / wan::kGiB; }

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

  fmt::print("one block of {}: dim {}, ffn_dim {}, {} heads; {} tokens, context {} tokens, float32; adapters of rank "
             "{} on every Linear over a frozen base; {} threads\n",
             c.preset, c.dim, c.ffn_dim, c.num_heads, tokens, c.text_len, rank, at::get_num_threads());
  torch::manual_seed(0);
  wan::WanBlock block(c);
  for (auto& p : block->parameters()) p.requires_grad_(false);
  for (const auto& module : block->modules())
    if (auto* linear = module->as<wan::WanLinearImpl>()) linear->attach_lora({rank, static_cast<double>(rank), 0.0}, torch::kFloat32);
  {
    torch::NoGradGuard no_grad;  // adapters that change the output, so every path carries a gradient
    for (auto& p : block->parameters())
      if (p.requires_grad()) p.normal_(0.0, 0.02);
  }
  const torch::Tensor x = torch::randn({1, tokens, c.dim}).requires_grad_(true);
  const torch::Tensor e0 = torch::randn({1, 6, c.dim}) * 0.1;
  const torch::Tensor context = torch::randn({1, c.text_len, c.dim});
  const torch::Tensor angles = torch::rand({tokens, c.head_dim() / 2}) * 6.3;
  const wan::RopeTables rope{torch::polar(torch::ones_like(angles), angles)};
  const torch::Tensor grad_output = torch::randn({1, tokens, c.dim});
  const double value = 4, per_token = static_cast<double>(tokens) * value;

  fmt::print("{:>6} | {:>10} | {:>10} | {:>13} | {:>13} | {:>7} | {:>7} | {:>9} | {}\n", "chunks", "forward", "backward",
             "values/token", "plan", "fwd s", "bwd s", "x memory", "same as whole");
  Result whole;
  double whole_backward = 0;
  for (const std::int64_t chunks : chunk_counts) {
    x.mutable_grad() = torch::Tensor();
    block->zero_grad();
    CountingAllocator::reset_peak();
    const std::size_t before_forward = CountingAllocator::live();
    auto start = std::chrono::steady_clock::now();
    const torch::Tensor out = wan::checkpointed_block(*block, x, e0, context, rope, nullptr, nullptr, false, chunks);
    const double forward_s = seconds_since(start);
    const double forward_peak = static_cast<double>(CountingAllocator::peak() - before_forward);
    CountingAllocator::reset_peak();
    const std::size_t before_backward = CountingAllocator::live();
    start = std::chrono::steady_clock::now();
    out.backward(grad_output);
    const double backward_s = seconds_since(start);
    const double backward_peak = static_cast<double>(CountingAllocator::peak() - before_backward);
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
                         torch::equal(r.output, whole.output) ? "bitwise" : "DIFFERS",
                         torch::equal(r.grad_x, whole.grad_x) ? "bitwise" : "DIFFERS", adapters);
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
  fmt::print("(values/token: the peak over tokens x 4 bytes, in brackets in units of dim; plan: the memory plan's count "
             "for the recomputed block)\n");
  return 0;
}
