# wanfw_add_shared_library(NAME SOURCES... [INCLUDE_DIR dir] [LINK libs...])
#
# A library of this repository that plugins (and the command line) share: the Wan DiT
# (libs/wan_dit), a data set plugin's reader (plugins/datasets/*). A plain shared library in lib/
# next to libwanfw_core.so, never in the plugin folder (which holds only plugins): the plugins
# find it through their $ORIGIN/../.. RPATH, the command line through $ORIGIN/../lib. It builds
# on the SDK alone, like a plugin; INCLUDE_DIR (default: include/) is its public header folder.
function(wanfw_add_shared_library name)
  cmake_parse_arguments(ARG "" "INCLUDE_DIR" "SOURCES;LINK" ${ARGN})
  if(NOT ARG_INCLUDE_DIR)
    set(ARG_INCLUDE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  add_library(${name} SHARED ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${ARG_INCLUDE_DIR} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC wanfw::sdk PRIVATE spdlog::spdlog fmt::fmt wanfw_warnings ${ARG_LINK})
  set_target_properties(${name} PROPERTIES
    DEFINE_SYMBOL ""
    BUILD_RPATH "$ORIGIN;${WANFW_TORCH_LIB_DIR}"
    INSTALL_RPATH "$ORIGIN;${WANFW_TORCH_LIB_DIR}")
  wanfw_use_pch(${name})
  install(TARGETS ${name} LIBRARY DESTINATION lib)
endfunction()
