#include "built_plugins.hpp"
#include "config/config.hpp"
#include "plugin_host/plugin_host.hpp"
#include "temp_dir.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;
namespace fs = std::filesystem;

namespace {
const fs::path kTestPlugins = built_plugins::test_plugins();
const fs::path kBadPlugins = built_plugins::bad_plugins();

std::string plugin_error(const fs::path& path) {
  try {
    PluginHost::load_library(path);
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("a plugin library loads and describes itself") {
  const PluginInfo info = PluginHost::load_library(built_plugins::linear_regression());
  CHECK(info.descriptor->kind == PluginKind::Model);
  CHECK(info.descriptor->name == "linear_regression");
  CHECK_FALSE(info.descriptor->options.empty());
}

TEST_CASE("a plugin built for another plugin ABI is refused with both versions named") {
  const std::string message = plugin_error(kBadPlugins / "abi" / "libwanfw_test_abi_mismatch.so");
  CHECK(message.find("libwanfw_test_abi_mismatch.so") != std::string::npos);
  CHECK(message.find("plugin ABI version 999") != std::string::npos);
  CHECK(message.find("this wanfw uses plugin ABI") != std::string::npos);
  CHECK(message.find("plugin ABI version " + std::to_string(host_plugin_abi_version())) != std::string::npos);
}

TEST_CASE("a plugin built against another LibTorch is refused with both versions named") {
  const std::string message = plugin_error(kBadPlugins / "torch" / "libwanfw_test_torch_mismatch.so");
  CHECK(message.find("LibTorch 1.0.0") != std::string::npos);
  CHECK(message.find("LibTorch " + host_torch_version()) != std::string::npos);
}

TEST_CASE("a shared library without a plugin record is refused") {
  const std::string message = plugin_error(kBadPlugins / "not-a-plugin" / "libwanfw_test_not_a_plugin.so");
  CHECK(message.find("not a wanfw plugin") != std::string::npos);
}

TEST_CASE("a file that is not a shared library is refused, naming the file") {
  testing::TempDir dir;
  testing::write_text(dir / "libgarbage.so", "this is not an ELF file");
  const std::string message = plugin_error(dir / "libgarbage.so");
  CHECK(message.find("libgarbage.so") != std::string::npos);
  CHECK(message.find("not a shared library") != std::string::npos);
}

TEST_CASE("refused libraries are listed with their reasons, and scanning goes on") {
  const PluginHost host({kBadPlugins / "abi", kTestPlugins});
  REQUIRE(host.skipped().size() == 1);
  CHECK(host.skipped()[0].reason.find("999") != std::string::npos);
  CHECK_NOTHROW(host.find(PluginKind::Model, "linear_regression", {}));
}

TEST_CASE("two plugins of one name in one folder are an error naming both files") {
  testing::TempDir dir;
  fs::copy_file(built_plugins::linear_regression(), dir / "liba.so");
  fs::copy_file(built_plugins::linear_regression(), dir / "libb.so");
  const PluginHost host({dir.path()});
  try {
    host.find(PluginKind::Model, "linear_regression", {"exp.yaml", 3, 9});
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    CHECK(message.find("liba.so") != std::string::npos);
    CHECK(message.find("libb.so") != std::string::npos);
    CHECK(message.find("exp.yaml:3:9") != std::string::npos);
  }
}

TEST_CASE("a plugin earlier in the search path shadows one of the same name later") {
  testing::TempDir first;
  fs::copy_file(built_plugins::linear_regression(), first / "libmine.so");
  const PluginHost host({first.path(), kTestPlugins});
  CHECK(host.find(PluginKind::Model, "linear_regression", {}).path == first / "libmine.so");
  REQUIRE(host.skipped().size() == 1);
  CHECK(host.skipped()[0].reason.find("shadowed by") != std::string::npos);
}

TEST_CASE("an unknown plugin name is an error that suggests and lists what exists") {
  const PluginHost host({kTestPlugins});
  try {
    host.find(PluginKind::Model, "linear_regresion", {"exp.yaml", 2, 9});
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("did you mean 'linear_regression'?") != std::string::npos);
  }
}

TEST_CASE("a plugin rejects options it did not declare, at their position") {
  const PluginHost host({kTestPlugins});
  Config config = Config::parse("model:\n  name: linear_regression\n  in_feature: 3\n", "exp.yaml");
  try {
    host.make_model(config, "model", {});
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    CHECK(message.find("exp.yaml:3:3") != std::string::npos);
    CHECK(message.find("did you mean 'in_features'?") != std::string::npos);
  }
}

TEST_CASE("a plugin object is built from its config section with defaults applied") {
  const PluginHost host({kTestPlugins});
  Config config = Config::parse("model:\n  name: linear_regression\n  in_features: 3\n", "exp.yaml");
  const auto model = host.make_model(config, "model", {});
  REQUIRE(model);
  CHECK(model->batch_fields().at(0).shape == std::vector<std::int64_t>{3});
  CHECK(config.resolved_yaml().find("out_features: 4") != std::string::npos);
}

TEST_CASE("a strategy builds the strategy of its subsection through the context") {
  const PluginHost host({kTestPlugins, built_plugins::plugins()});
  Config config = Config::parse("strategy:\n  name: grad_accum\n  steps: 3\n  inner: {name: single, device: cpu}\n",
                                "exp.yaml");
  const auto strategy = host.make_strategy(config, "strategy", {});
  CHECK(strategy->accumulation_steps() == 3);
  CHECK(strategy->describe().find("single device cpu") != std::string::npos);
}

TEST_CASE("a missing subsection is a config error naming its path") {
  const PluginHost host({built_plugins::plugins()});
  Config config = Config::parse("strategy:\n  name: grad_accum\n", "exp.yaml");
  try {
    host.make_strategy(config, "strategy", {});
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("'strategy.inner' is missing") != std::string::npos);
  }
}
