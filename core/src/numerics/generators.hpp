#pragma once
// Internal: the process's default random generators, for checkpoints and seeded scopes.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace wanfw {

/// Every default generator of this process: "cpu", and "cuda:N" for each visible device.
std::vector<std::pair<std::string, at::Generator>> default_generators();

/// Seeds every default generator from (seed, rank, step), a different stream for every rank
/// and step that any run reproduces.
void seed_generators(std::uint64_t seed, int rank, std::int64_t step);

/// Seeds every default generator from `seed` for its lifetime and puts their states back when
/// it ends, so that work done inside (validation) leaves the training's random stream as it was.
class SeededGenerators {
 public:
  explicit SeededGenerators(std::uint64_t seed);
  ~SeededGenerators();
  SeededGenerators(const SeededGenerators&) = delete;
  SeededGenerators& operator=(const SeededGenerators&) = delete;

 private:
  std::vector<std::pair<at::Generator, at::Tensor>> saved_;
};

}  // namespace wanfw
