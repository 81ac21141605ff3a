# wanfw_add_plugin(NAME SOURCES source... [OUTPUT_DIRECTORY dir] [DEFINITIONS def...])
#
# Builds a wanfw plugin: a shared library (lib<NAME>.so) linked to wanfw::sdk, which carries the
# SDK headers, C++20, LibTorch (the one wanfw was built with, without the system CUDA runtime),
# and the include order that keeps LibTorch's bundled fmt from shadowing the system's. Every
# symbol must resolve at link time (--no-undefined), so a missing library is a build error, not
# a load error. Installed with wanfw's CMake package; wanfw's own plugins use it too.
function(wanfw_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;DEFINITIONS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "wanfw_add_plugin(${name}): name its sources with SOURCES a.cpp b.cpp ...")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE wanfw::sdk)
  target_link_options(${name} PRIVATE "LINKER:--no-undefined")
  if(ARG_DEFINITIONS)
    target_compile_definitions(${name} PRIVATE ${ARG_DEFINITIONS})
  endif()
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    DEFINE_SYMBOL ""
    BUILD_RPATH "${WANFW_PLUGIN_RPATH}"
    INSTALL_RPATH "${WANFW_PLUGIN_RPATH}")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  endif()
endfunction()
