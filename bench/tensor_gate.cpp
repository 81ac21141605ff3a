// Benchmark: what the tensor gate's value check costs when a checkpoint is loaded. Reads every
// tensor of a Wan checkpoint (by default the size of Wan2.2 TI2V-5B, 5.0 billion bf16 values,
// 10 GB) from its memory mapping into float32 parameters, three ways, interleaved:
//
//   plain    destination.copy_(source): reading and converting, no check
//   gated    wanfw::copy_checked: the same copy with the finite check in the same pass (what
//            load_wan_weights does)
//   apart    wanfw::check_tensor, then the plain copy: the check as a pass of its own
//
// and prints each pass's time, its throughput, and the ratio of gated (and apart) to plain.
//
//   build/bin/wanfw_bench_tensor_gate FILE [--preset NAME] [--repeats N]
//
// FILE is written first when it does not exist (random values of the preset's shapes). The file
// is read once before timing, so every pass reads from the page cache: the figure is the check's
// cost against the fastest reading there is, not against a disk.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "wan/wan_config.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/io/tensor_check.hpp"

namespace fs = std::filesystem;

namespace {

void write_checkpoint(const fs::path& file, const wan::WanConfig& config) {
  fmt::print("writing {} ({} parameters, bf16) ...\n", file.string(), config.parameter_count());
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const wan::ParameterSpec& p : config.parameters())
    tensors.emplace_back(p.name, (at::randn(p.shape, at::kFloat) * 0.02).to(at::kBFloat16));
  wanfw::write_safetensors(file, tensors, {{"format", "pt"}});
}

double seconds(const std::function<void()>& pass) {
  const auto start = std::chrono::steady_clock::now();
  pass();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      std::fprintf(stderr, "usage: %s FILE [--preset NAME] [--repeats N]\n", argv[0]);
      return 2;
    }
    const fs::path file = argv[1];
    std::string preset = "wan2.2-ti2v-5b";
    int repeats = 3;
    for (int i = 2; i + 1 < argc; i += 2) {
      const std::string flag = argv[i];
      if (flag == "--preset")
        preset = argv[i + 1];
      else if (flag == "--repeats")
        repeats = std::stoi(argv[i + 1]);
      else
        throw wanfw::Error(fmt::format("unknown option {}", flag));
    }
    const wan::WanConfig config = wan::wan_preset(preset);
    if (!fs::exists(file)) write_checkpoint(file, config);

    const auto source = wanfw::SafetensorsFile::open(file);
    std::int64_t largest = 0, values = 0;
    for (const auto& record : source.records()) {
      const std::int64_t numel = source.tensor(record.name).numel();
      largest = std::max(largest, numel);
      values += numel;
    }
    const at::Tensor buffer = at::empty({largest}, at::kFloat);  // one parameter's room, reused
    const wanfw::TensorRole role = wanfw::TensorRole::weight();
    auto each = [&](const std::function<void(const at::Tensor&, const at::Tensor&, const std::string&)>& body) {
      for (const auto& record : source.records()) {
        const at::Tensor from = source.tensor(record.name);
        body(buffer.narrow(0, 0, from.numel()).view(from.sizes()), from, record.name);
      }
    };
    const auto plain = [&] {
      each([](const at::Tensor& to, const at::Tensor& from, const std::string&) { to.copy_(from); });
    };
    const auto gated = [&] {
      each([&](const at::Tensor& to, const at::Tensor& from, const std::string& name) {
        wanfw::copy_checked(to, from, role, file, name);
      });
    };
    const auto apart = [&] {
      each([&](const at::Tensor& to, const at::Tensor& from, const std::string& name) {
        wanfw::check_tensor(from, role, file, name);
        to.copy_(from);
      });
    };
    fmt::print("{}: {} tensors, {:.2f} G values ({:.1f} GB on disk), into float32, {} threads\n", file.string(),
               source.records().size(), values / 1e9, static_cast<double>(fs::file_size(file)) / 1e9,
               at::get_num_threads());
    (void)seconds(plain);  // the page cache holds the file from here on
    std::vector<double> p, g, a;
    for (int r = 0; r < repeats; ++r) {  // interleaved, so a machine that drifts weighs on all three
      p.push_back(seconds(plain));
      g.push_back(seconds(gated));
      a.push_back(seconds(apart));
      fmt::print("  round {}: plain {:.3f} s, gated {:.3f} s, apart {:.3f} s\n", r + 1, p.back(), g.back(), a.back());
    }
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double mp = median(p), mg = median(g), ma = median(a);
    const double gigabytes = static_cast<double>(values) * 2 / 1e9;
    fmt::print("median: plain {:.3f} s ({:.2f} GB/s read), gated {:.3f} s, apart {:.3f} s\n", mp, gigabytes / mp, mg,
               ma);
    fmt::print("ratio to plain reading: gated {:.3f}x, check as a pass of its own {:.3f}x\n", mg / mp, ma / mp);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
