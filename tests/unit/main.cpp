// The unit tests' entry point. Cases that need a CUDA device are in the test suite "cuda", a CTest
// entry of their own (tests/CMakeLists.txt): on a machine without a device that entry exits with
// CTest's skip code, so the suite reports it as not run instead of counting it as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstdio>
#include <string_view>

#include <torch/cuda.h>
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {
constexpr int kSkipped = 77;  // the entry's SKIP_RETURN_CODE
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--test-suite=cuda" && !torch::cuda::is_available()) {
      std::puts("skipped: this machine has no CUDA device; the cases of the test suite \"cuda\" run on a GPU machine");
      return kSkipped;
    }
  doctest::Context context(argc, argv);
  return context.run();
}
