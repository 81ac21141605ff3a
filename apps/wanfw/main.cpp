// wanfw: train video diffusion models from one YAML file.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "host/console.hpp"
#include "wanfw/error.hpp"
#include "wanfw/version.hpp"

namespace {

const char* kUsage = R"(usage: wanfw <command> [options]

Train video diffusion models; everything is chosen in the YAML config.

commands:
  run CONFIG [--set key=value]... [--resume auto|PATH]   train
  validate CONFIG [--set key=value]...                   check a config without training
  predict CONFIG --inputs IN --out OUT [--set k=v]...    run the model once on saved tensors
  sample CONFIG --out OUT [--inputs IN] [--seed N]...    draw samples (latents) with the model's sampler
  export CONFIG --out FOLDER [--checkpoint PATH]...      weights in the model's release layout
  model-info CONFIG [--gpus N] [--set key=value]...      parameters and memory per GPU, without allocating
  plugins [CONFIG] [--plugin-path DIR]...                list the plugins found (and refused)
  plugins show NAME [CONFIG] [--plugin-path DIR]...      a plugin's options, defaults and docs
  config-reference [--plugin-path DIR]...                every config option, as Markdown
  data synth DIR [--samples N] [--buckets FxHxW,...]...  a synthetic data set folder in the real format
  data inspect DIR [--batch-size B]...                   samples, buckets, shapes, bytes, the bucket plan
  data verify DIR                                        checksums, shapes and values of every sample

options:
  --version     print wanfw's and LibTorch's versions
  --help, -h    this help (also after any command)

exit codes: 0 success, 1 failure while running, 2 bad usage or configuration
)";

}  // namespace

namespace {

int run_command_line(int argc, char** argv) {
  // A write past a file-size limit fails with EFBIG and is reported like a full disk, instead of
  // killing the process halfway through a checkpoint.
  std::signal(SIGXFSZ, SIG_IGN);
  wanfw::install_console_logger();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? wanfw::cli::kBadUsage : wanfw::cli::kSuccess;
  }
  if (args[0] == "--version") {
    std::printf("wanfw %s (plugin ABI %u, LibTorch %s, CPU vector unit %s)\n", wanfw::version().c_str(),
                wanfw::host_plugin_abi_version(), wanfw::host_torch_version().c_str(),
                wanfw::host_cpu_vector_unit().c_str());
    return wanfw::cli::kSuccess;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    if (const std::optional<int> code = wanfw::cli::dispatch(command, args)) return *code;
    std::fprintf(stderr, "wanfw: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return wanfw::cli::kBadUsage;
  } catch (const wanfw::ConfigError& e) {
    spdlog::error("{}", e.what());
    return wanfw::cli::kBadUsage;
  } catch (const wanfw::PluginError& e) {
    spdlog::error("{}", e.what());
    return wanfw::cli::kBadUsage;
  } catch (const c10::Error& e) {  // LibTorch's own message, without its C++ backtrace
    spdlog::error("{}", e.what_without_backtrace());
    return wanfw::cli::kFailure;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return wanfw::cli::kFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int code = run_command_line(argc, argv);
  // Every command has closed what it wrote by now. Leave without the libraries' static
  // destructors: LibTorch's CUDA library unregisters each of its kernel images at exit, which
  // faults some 100 MiB of its code into memory and takes tens of milliseconds, GPU or not.
  std::fflush(nullptr);
  spdlog::shutdown();
  std::_Exit(code);
}
