// Logger `side_effects` (test plugin): a plugin whose code leaves traces. Its static initialiser
// and its describe() each create a file in $WANFW_TEST_TRACE_DIR. Built with the host's plugin ABI
// (loading it must leave both traces) and with another one (the host must refuse it before any of
// its code runs, so no trace may appear); also the tests' plugins built for another ABI and
// against another LibTorch (tests/plugins/CMakeLists.txt).

#include <cstdlib>
#include <fstream>
#include <string>

#include "wanfw/plugin.hpp"

#define WANFW_TEST_STRINGIZE2(x) #x
#define WANFW_TEST_STRINGIZE(x) WANFW_TEST_STRINGIZE2(x)

namespace {

void leave_trace(const char* what) {
  const char* dir = std::getenv("WANFW_TEST_TRACE_DIR");
  if (dir == nullptr) return;
  std::ofstream(std::string(dir) + "/" + what + "-" + WANFW_TEST_STRINGIZE(TRACE_TAG)) << "ran\n";
}

struct StaticInitialiser {
  StaticInitialiser() { leave_trace("static-init"); }
} static_initialiser;

class NullLogger final : public wanfw::Logger {
 public:
  void open(const wanfw::LoggerContext&) override {}
  void log_scalars(std::int64_t, const std::map<std::string, double>&) override {}
};

wanfw::PluginDescriptor describe() {
  leave_trace("describe");
  auto d = wanfw::PluginDescriptor::for_logger("side_effects", "1.0.0", "Test logger that records that its code ran.");
  d.make_logger = [](const wanfw::Options&, const wanfw::PluginContext&) -> std::unique_ptr<wanfw::Logger> {
    return std::make_unique<NullLogger>();
  };
  return d;
}

}  // namespace

WANFW_PLUGIN(Logger, describe)
