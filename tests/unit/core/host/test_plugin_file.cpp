#include <fstream>
#include <vector>

#include "built_plugins.hpp"
#include "plugin_host/plugin_file.hpp"
#include "temp_dir.hpp"
#include "wanfw/error.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;
namespace fs = std::filesystem;

namespace {

std::string record_error(const fs::path& path) {
  try {
    read_plugin_record(path);
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

/// The first `bytes` bytes of `from`, written to `to` (an interrupted copy).
void copy_prefix(const fs::path& from, const fs::path& to, std::size_t bytes) {
  std::ifstream in(from, std::ios::binary);
  std::vector<char> data(bytes);
  in.read(data.data(), static_cast<std::streamsize>(bytes));
  std::ofstream(to, std::ios::binary).write(data.data(), in.gcount());
}
}  // namespace

TEST_CASE("the plugin record is read from the file with the versions the plugin was built with") {
  const PluginRecord record = read_plugin_record(built_plugins::linear_regression());
  CHECK(record.abi_version == host_plugin_abi_version());
  CHECK(std::string(record.torch_version) == host_torch_version());
  CHECK(std::string(record.wanfw_version) == version());
  CHECK(record.kind == static_cast<std::uint32_t>(PluginKind::Model));
}

TEST_CASE("the record of a plugin built for another ABI is read without loading it") {
  const PluginRecord record =
      read_plugin_record(built_plugins::bad_plugins() / "abi" / "libwanfw_test_abi_mismatch.so");
  CHECK(record.abi_version == 999);
}

TEST_CASE("a truncated copy of a real plugin is refused as truncated, at any length") {
  testing::TempDir dir;
  const auto size = fs::file_size(built_plugins::linear_regression());
  for (const std::size_t bytes : {std::size_t{10}, std::size_t{64}, std::size_t{1024}, std::size_t{4096},
                                  static_cast<std::size_t>(size / 2), static_cast<std::size_t>(size - 1)}) {
    const fs::path copy = dir / ("libpartial-" + std::to_string(bytes) + ".so");
    copy_prefix(built_plugins::linear_regression(), copy, bytes);
    const std::string message = record_error(copy);
    CAPTURE(bytes);
    CHECK(message.find(copy.filename().string()) != std::string::npos);
    CHECK((message.find("truncated") != std::string::npos || message.find("not a shared library") != std::string::npos));
  }
}

TEST_CASE("a library without the record is not a wanfw plugin") {
  const std::string message =
      record_error(built_plugins::bad_plugins() / "not-a-plugin" / "libwanfw_test_not_a_plugin.so");
  CHECK(message.find("not a wanfw plugin") != std::string::npos);
}
