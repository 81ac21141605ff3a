# wanfw_add_plugin(NAME SOURCES... [TEST] [OUTPUT_DIRECTORY dir] [DEFINITIONS defs...])
#
# Builds a wanfw plugin: a shared library that exports one descriptor (see wanfw/plugin.hpp).
# Plugins land in build/lib/wanfw/plugins (TEST ones in build/lib/wanfw/test-plugins) and link
# only the SDK (wanfw::core) and LibTorch.
function(wanfw_add_plugin name)
  cmake_parse_arguments(ARG "TEST" "OUTPUT_DIRECTORY" "SOURCES;DEFINITIONS" ${ARGN})
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE wanfw::core wanfw_warnings)
  target_compile_definitions(${name} PRIVATE ${ARG_DEFINITIONS})
  wanfw_use_pch(${name})
  if(ARG_OUTPUT_DIRECTORY)
    set(out ${ARG_OUTPUT_DIRECTORY})
  elseif(ARG_TEST)
    set(out ${WANFW_TEST_PLUGIN_OUTPUT_DIRECTORY})
  else()
    set(out ${WANFW_PLUGIN_OUTPUT_DIRECTORY})
  endif()
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${out}
    DEFINE_SYMBOL ""
    BUILD_RPATH "$ORIGIN/../..;${WANFW_TORCH_LIB_DIR}")
endfunction()
