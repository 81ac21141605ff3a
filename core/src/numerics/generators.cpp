#include "numerics/generators.hpp"

#include <mutex>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/sample_random.hpp"

namespace wanfw {

std::vector<std::pair<std::string, at::Generator>> default_generators() {
  std::vector<std::pair<std::string, at::Generator>> generators;
  generators.emplace_back("cpu", at::detail::getDefaultCPUGenerator());
  // Asked once: the trainer seeds the generators every step.
  static const std::int64_t cuda_devices =
      torch::cuda::is_available() ? static_cast<std::int64_t>(torch::cuda::device_count()) : 0;
  for (std::int64_t i = 0; i < cuda_devices; ++i)
      generators.emplace_back(fmt::format("cuda:{}", i),
                              at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<int8_t>(i))));
  return generators;
}

void seed_generators(std::uint64_t seed, int rank, std::int64_t step) {
  const std::uint64_t value =
      mix_seed(mix_seed(mix_seed(seed) ^ static_cast<std::uint64_t>(rank)) ^ static_cast<std::uint64_t>(step));
  for (auto& [name, generator] : default_generators()) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(value);
  }
}

SeededGenerators::SeededGenerators(std::uint64_t seed) {
  for (auto& [name, generator] : default_generators()) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    saved_.emplace_back(generator, generator.get_state());
    generator.set_current_seed(seed);
  }
}

SeededGenerators::~SeededGenerators() {
  for (auto& [generator, state] : saved_) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
}

}  // namespace wanfw
