// The csv logger plugin, loaded through the plugin host as a run would load it.

#include <fstream>
#include <sstream>

#include "config/config.hpp"
#include "plugin_host/plugin_host.hpp"
#include "temp_dir.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {
std::shared_ptr<Logger> make_csv_logger() {
  static const PluginHost host(PluginHost::search_path({}));
  Config config = Config::parse("loggers:\n  - name: csv\n", "exp.yaml");
  return host.make_logger(config, "loggers.0", {});
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

TEST_CASE("a metric that appears later widens the header and keeps earlier rows") {
  testing::TempDir dir;
  auto logger = make_csv_logger();
  logger->open({dir.path(), 0});
  logger->log_scalars(1, {{"loss", 0.5}});
  logger->log_scalars(2, {{"loss", 0.25}, {"val_loss", 0.75}});
  logger->close();
  CHECK(read(dir / "metrics.csv") == "step,loss,val_loss\n1,0.5,\n2,0.25,0.75\n");
}

TEST_CASE("every row reaches the file as it is logged, before close") {
  testing::TempDir dir;
  auto logger = make_csv_logger();
  logger->open({dir.path(), 0});
  logger->log_scalars(1, {{"loss", 2.0}});
  CHECK(read(dir / "metrics.csv") == "step,loss\n1,2\n");
}

TEST_CASE("resuming drops rows past the resume step and appends after it") {
  testing::TempDir dir;
  auto first = make_csv_logger();
  first->open({dir.path(), 0});
  for (int step = 1; step <= 4; ++step) first->log_scalars(step, {{"loss", 1.0 / step}});
  first->close();
  auto resumed = make_csv_logger();
  resumed->open({dir.path(), 2});
  resumed->log_scalars(3, {{"loss", 9.0}});
  resumed->close();
  CHECK(read(dir / "metrics.csv") == "step,loss\n1,1\n2,0.5\n3,9\n");
}
