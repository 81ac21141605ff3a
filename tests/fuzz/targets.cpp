// The fuzz binary's entry points: libFuzzer calls LLVMFuzzerInitialize once with the command line,
// which picks the harness named by the name the binary was called as (bin/fuzz_<target>, a link),
// then LLVMFuzzerTestOneInput for every input, which runs that harness.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "fuzz_target.hpp"

namespace {

std::map<std::string, FuzzEntry>& targets() {
  static std::map<std::string, FuzzEntry> registered;
  return registered;
}

FuzzEntry chosen = nullptr;

}  // namespace

bool register_fuzz_target(const char* name, FuzzEntry entry) {
  targets().emplace(name, entry);
  return true;
}

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  std::string called = *argc > 0 ? (*argv)[0] : "";
  called = called.substr(called.find_last_of('/') + 1);
  const std::string prefix = "fuzz_";
  const auto found = called.rfind(prefix, 0) == 0 ? targets().find(called.substr(prefix.size())) : targets().end();
  if (found == targets().end()) {
    std::fprintf(stderr,
                 "wanfw fuzz: called as '%s'; call one of the links bin/fuzz_<target>, targets:", called.c_str());
    for (const auto& [name, entry] : targets()) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    std::exit(2);
  }
  chosen = found->second;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { return chosen(data, size); }
