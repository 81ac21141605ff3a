# wanfw_add_builtin_plugin(NAME SOURCES... [TEST] [OUTPUT_DIRECTORY dir] [DEFINITIONS defs...])
#
# A plugin of this repository: wanfw_add_plugin (the function plugin authors get from the
# installed package) plus what only this build has: warnings as errors, the shared precompiled
# header, spdlog/fmt, and the output folders build/lib/wanfw/plugins (TEST: .../test-plugins).
set(WANFW_PLUGIN_RPATH "$ORIGIN/../..;${WANFW_TORCH_LIB_DIR}")  # lib/wanfw/plugins -> lib
include(wanfwAddPlugin)

function(wanfw_add_builtin_plugin name)
  cmake_parse_arguments(ARG "TEST" "OUTPUT_DIRECTORY" "SOURCES;DEFINITIONS" ${ARGN})
  if(ARG_OUTPUT_DIRECTORY)
    set(out ${ARG_OUTPUT_DIRECTORY})
  elseif(ARG_TEST)
    set(out ${WANFW_TEST_PLUGIN_OUTPUT_DIRECTORY})
  else()
    set(out ${WANFW_PLUGIN_OUTPUT_DIRECTORY})
  endif()
  wanfw_add_plugin(${name} SOURCES ${ARG_SOURCES} OUTPUT_DIRECTORY ${out} DEFINITIONS ${ARG_DEFINITIONS})
  target_link_libraries(${name} PRIVATE spdlog::spdlog fmt::fmt wanfw_warnings)
  wanfw_use_pch(${name})
  if(NOT ARG_TEST AND NOT ARG_OUTPUT_DIRECTORY)
    install(TARGETS ${name} LIBRARY DESTINATION ${WANFW_INSTALL_PLUGIN_DIR})
    set_property(GLOBAL APPEND PROPERTY WANFW_RUNTIME_PLUGINS ${name})  # the wanfw_runtime target's
  endif()
endfunction()
