// wanfw_test_tools TOOL ARGS...: runs the tool of that name (tools.hpp) with ARGS.
#include <cstdio>
#include <string_view>

#include "tools.hpp"

namespace {

struct Tool {
  std::string_view name;
  int (*run)(int argc, char** argv);
};

constexpr Tool kTools[] = {
    {"collectives", collectives_tool},
    {"safetensors", safetensors_tool},
    {"ulysses", ulysses_tool},
    {"vae", vae_tool},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    for (const Tool& tool : kTools)
      if (tool.name == argv[1]) return tool.run(argc - 1, argv + 1);
  }
  std::fputs("usage: wanfw_test_tools collectives|safetensors|ulysses|vae ARGS...\n", stderr);
  return 2;
}
