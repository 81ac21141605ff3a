# `cmake --install build --prefix PREFIX`: the command line, the core library, the bundled
# plugins, the SDK headers, and lib/cmake/wanfw, the package that plugin projects find with
# find_package(wanfw). Everything inside the prefix is found relative to it ($ORIGIN RPATHs, a
# package that locates itself), so the prefix may be moved; LibTorch stays where it was when
# wanfw was built, and the package records it.
include(CMakePackageConfigHelpers)

file(STRINGS ${PROJECT_SOURCE_DIR}/core/include/wanfw/version.hpp _abi REGEX "^#define WANFW_PLUGIN_ABI_VERSION [0-9]+")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" WANFW_PLUGIN_ABI "${_abi}")

install(TARGETS wanfw_core wanfw_sdk wanfw_torch EXPORT wanfwTargets
        LIBRARY DESTINATION lib
        INCLUDES DESTINATION include)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/include/wanfw DESTINATION include)
install(EXPORT wanfwTargets NAMESPACE wanfw:: DESTINATION ${WANFW_INSTALL_CMAKE_DIR})

configure_file(${PROJECT_SOURCE_DIR}/cmake/wanfwConfig.cmake.in
               ${PROJECT_BINARY_DIR}/package/wanfwConfig.cmake @ONLY)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/wanfwConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY ExactVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/wanfwConfig.cmake
              ${PROJECT_BINARY_DIR}/package/wanfwConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/wanfwTorch.cmake
              ${PROJECT_SOURCE_DIR}/cmake/wanfwAddPlugin.cmake
        DESTINATION ${WANFW_INSTALL_CMAKE_DIR})
