#pragma once
// The tiny Wan DiT the unit tests run, and inputs for it.

#include <cstdint>

#include <torch/torch.h>

#include "wan/wan_config.hpp"
#include "wan/wan_dit.hpp"

namespace wanfw::testing {

struct TinyInputs {
  torch::Tensor x, t, context;
};

/// Two samples of latents [in_dim, 3, 4, 4], timesteps in [0, 1000) and 5-token contexts.
inline TinyInputs tiny_inputs(const wan::WanConfig& c, std::uint64_t seed = 7) {
  torch::manual_seed(seed);
  return {torch::randn({2, c.in_dim, 3, 4, 4}), torch::rand({2}) * 1000, torch::randn({2, 5, c.text_dim})};
}

/// A DiT of `config` with every weight random: the official initialisation zeroes the head, which
/// would hide errors (and pass adapters no gradient).
inline wan::WanDiT random_tiny_dit(const wan::WanConfig& config = wan::wan_preset("tiny")) {
  torch::manual_seed(3);
  wan::WanDiT dit(config);
  torch::NoGradGuard no_grad;
  for (auto& p : dit->parameters()) p.normal_(0.0, 0.2);
  return dit;
}

}  // namespace wanfw::testing
