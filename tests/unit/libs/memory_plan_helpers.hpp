#pragma once
// What the memory plan's unit tests share: a plan's part by the start of its name, the tiny preset
// widened to the real presets' block-64 scales, and adapters on every block.

#include <string>

#include "wan/lora.hpp"
#include "wan/memory_plan.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

inline double part(const wan::MemoryEstimate& e, const std::string& starts) {
  for (const auto& [what, bytes] : e.device_parts)
    if (what.rfind(starts, 0) == 0) return bytes;
  for (const auto& [what, bytes] : e.host_parts)
    if (what.rfind(starts, 0) == 0) return bytes;
  FAIL("no part starts with " << starts);
  return 0;
}

/// The tiny preset widened so that 64 divides every input size: block-64 scales, as the real presets have.
inline wan::WanConfig wide_tiny() {
  wan::WanConfig config = wan::wan_preset("tiny");
  config.dim = 128;
  config.ffn_dim = 256;
  config.num_heads = 4;
  return config;
}

/// Rank-4 adapters on every block Linear.
inline wan::LoraSettings block_adapters() {
  wan::LoraSettings lora;
  lora.rank = 4;
  lora.alpha = 4;
  lora.targets = {"blocks.*"};
  return lora;
}
