#include "wanfw/sample_random.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "numerics/generators.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

namespace {

/// FNV-1a: a stream name as 64 bits.
std::uint64_t hash_name(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

enum class Distribution { Normal, Uniform };

at::Tensor draw(const Batch& batch, std::string_view stream, at::IntArrayRef shape, at::ScalarType dtype,
                Distribution distribution) {
  if (static_cast<std::int64_t>(batch.sample_ids.size()) != batch.size)
    throw Error(fmt::format("random stream '{}': the batch of {} carries {} sample ids", stream, batch.size,
                            batch.sample_ids.size()),
                "batches from the data loader carry them; a batch built by hand needs Batch::sample_ids (and "
                "Batch::seed, Batch::epoch) set");
  std::vector<at::Tensor> draws;
  draws.reserve(batch.sample_ids.size());
  const auto options = at::TensorOptions().dtype(at::kFloat);
  for (const std::int64_t id : batch.sample_ids) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(sample_stream_seed(batch.seed, id, batch.epoch, stream));
    draws.push_back(distribution == Distribution::Normal ? at::randn(shape, generator, options)
                                                         : at::rand(shape, generator, options));
  }
  at::Tensor out = draws.empty() ? at::empty({0}, options) : at::stack(draws);
  const at::Device device = batch.device();
  if (device.is_cuda()) out = out.pin_memory();
  return out.to(device, dtype, /*non_blocking=*/device.is_cuda());
}

}  // namespace

std::uint64_t mix_seed(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t sample_stream_seed(std::uint64_t seed, std::int64_t sample_id, std::int64_t epoch,
                                 std::string_view stream) {
  std::uint64_t x = mix_seed(seed);
  x = mix_seed(x ^ static_cast<std::uint64_t>(sample_id));
  x = mix_seed(x ^ static_cast<std::uint64_t>(epoch));
  return mix_seed(x ^ hash_name(stream));
}

at::Tensor sample_randn(const Batch& batch, std::string_view stream, at::IntArrayRef shape, at::ScalarType dtype) {
  return draw(batch, stream, shape, dtype, Distribution::Normal);
}

at::Tensor sample_rand(const Batch& batch, std::string_view stream, at::IntArrayRef shape, at::ScalarType dtype) {
  return draw(batch, stream, shape, dtype, Distribution::Uniform);
}

double step_rand(const Batch& batch, std::string_view stream) {
  // Keyed by the step where a sample's streams take its id; the name keeps the two apart.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(
      sample_stream_seed(batch.seed, batch.step, batch.epoch, fmt::format("step/{}", stream)));
  return at::rand({1}, generator, at::TensorOptions().dtype(at::kDouble)).item<double>();
}

}  // namespace wanfw
