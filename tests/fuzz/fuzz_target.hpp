#pragma once
// One fuzz binary holds every harness (they compile as one unit: the ATen headers are parsed once,
// not once a harness). A harness names its entry with WANFW_FUZZ_TARGET(<target>); the binary runs
// the target it is called as: bin/fuzz_<target> is a link to it (targets.cpp).
#include <cstddef>
#include <cstdint>

using FuzzEntry = int (*)(const std::uint8_t* data, std::size_t size);

/// Adds a target to the binary's list (a static initializer of each harness calls it).
bool register_fuzz_target(const char* name, FuzzEntry entry);

/// `WANFW_FUZZ_TARGET(safetensors_reader) { ...data, size... return 0; }`: the body libFuzzer
/// runs for every input when the binary is called as fuzz_safetensors_reader.
#define WANFW_FUZZ_TARGET(target)                                                           \
  namespace fuzz_##target {                                                                 \
    int test_one_input(const std::uint8_t* data, std::size_t size);                         \
    [[maybe_unused]] const bool registered = register_fuzz_target(#target, test_one_input); \
  }                                                                                         \
  int fuzz_##target::test_one_input(const std::uint8_t* data, std::size_t size)
