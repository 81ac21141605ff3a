// The host memory a process may still take (memory/host_memory.hpp), and the refusal of a need
// beyond it.
#include <string>

#include "memory/host_memory.hpp"
#include "wanfw/error.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

TEST_CASE("MemAvailable is read from /proc/meminfo's text in bytes") {
  const std::string meminfo = "MemTotal:       24567892 kB\nMemFree:         1234567 kB\nMemAvailable:   20000000 kB\n";
  CHECK(meminfo_available_bytes(meminfo) == 20000000.0 * 1024);
  CHECK_FALSE(meminfo_available_bytes("MemTotal:       24567892 kB\n").has_value());
}

TEST_CASE("this machine's available host memory is read, and a need beyond it is refused naming both figures") {
  const auto available = available_host_memory();
  REQUIRE(available.has_value());
  CHECK(available->bytes > 0);
  CHECK_NOTHROW(require_host_memory(1024.0, 4, "a small arena", "nothing"));
  try {
    require_host_memory(available->bytes, 2, "optimizer.state host", "keep the state on the device");
    FAIL("two processes of all the available memory each were not refused");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("optimizer.state host needs ") != std::string::npos);
    CHECK(what.find("(2 processes of this host, ") != std::string::npos);
    CHECK(what.find("GiB available (" + available->source + ")") != std::string::npos);
    CHECK(what.find("keep the state on the device") != std::string::npos);  // what to do
  }
}
