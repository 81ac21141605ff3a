#pragma once
// The plugins the build made for the tests, found from the test binary's own place
// (<build>/bin/wanfw_unit_tests): no build folder's path is compiled in, so these cases compile
// with the same command line in any clone (ccache) and join the unity batches.
#include <filesystem>

namespace built_plugins {

/// <build>, two folders above the running binary.
inline std::filesystem::path build_folder() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path();
}
/// <build>/lib/wanfw/test-plugins: the plugins that exist for the tests (tests/plugins).
inline std::filesystem::path test_plugins() { return build_folder() / "lib" / "wanfw" / "test-plugins"; }
/// <build>/lib/wanfw/bad-plugins: the libraries the host must refuse, one folder each.
inline std::filesystem::path bad_plugins() { return build_folder() / "lib" / "wanfw" / "bad-plugins"; }
/// <build>/lib/wanfw/plugins: the plugins wanfw ships.
inline std::filesystem::path plugins() { return build_folder() / "lib" / "wanfw" / "plugins"; }
/// The linear regression model plugin (tests/plugins/linear_regression).
inline std::filesystem::path linear_regression() { return test_plugins() / "libwanfw_model_linear_regression.so"; }

}  // namespace built_plugins
